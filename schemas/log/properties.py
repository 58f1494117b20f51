"""Message properties (`name \\x01 value \\x02 ...`) into an Arrow map column, as 4.9.x decodes them.

`MessageDecoder.string2messageProperties` keeps a piece only when it has a name and a value: the name
is what precedes the first \\x01 and must be non-empty, the value (the rest, \\x01 included) must be
non-empty; everything else is dropped. A repeated name keeps its last value (HashMap.put).
"""
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from schemas import kernels as K
from schemas.columns import slices_to_binary, to_utf8

NAMED = ("TAGS", "KEYS", "UNIQ_KEY")  # the properties a decoded message also carries as columns of their own


def parse_properties(blobs: pa.Array, extract: Iterable[str] = (), coded: Iterable[str] = ()) -> Any:
    """map<string, string> per row from a string array of raw property blobs (order of appearance).

    One compiled scan over the bytes of the whole column (`kernels.split_properties`): \x01 and \x02 never
    occur inside a multi-byte UTF-8 sequence, so separator positions are character boundaries. With
    `extract` (names such as "TAGS"), also returns {name: string column of that property's value per row}; with
    `coded`, also {name: that property's value per row as a dictionary column} (its distinct values in order of
    appearance, null where absent; a string column when more than half the rows hold distinct values): encoded
    while the split's bytes are hot, for SQL92's evaluation per distinct value (filtering/sql92/vectorized.py)."""
    n = len(blobs)
    offsets = np.frombuffer(blobs.buffers()[1], dtype=np.int32)[blobs.offset: blobs.offset + n + 1].astype(np.int64)
    data = np.frombuffer(blobs.buffers()[2], dtype=np.uint8) if n and blobs.buffers()[2] is not None \
        else np.zeros(0, np.uint8)
    if not n:
        offsets = np.zeros(1, np.int64)
    keys, values, map_offsets, named, _ = K.split_properties(data, offsets, tuple(dict.fromkeys((*extract, *coded))))
    return _map(keys, values, map_offsets, named, extract, coded)


def parse_properties_at(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, extract: Iterable[str] = (),
                        coded: Iterable[str] = ()) -> Any:
    """parse_properties of the blobs buf[starts[i]:starts[i] + lengths[i]] (the records' fields in a
    commit-log buffer), split where they lie, not copied into a string column first (on the bench store
    that copy and its UTF-8 check were a tenth of decoding). The keys and values kept are checked instead:
    ASCII, seen during the split, or valid UTF-8. Where some are not, the blobs are copied and decoded as
    parse_properties does (invalid bytes replaced as Java's new String does: blob by blob), the same answer."""
    starts = np.asarray(starts, np.int64)
    keys, values, map_offsets, named, ascii = K.split_properties(buf, starts, tuple(dict.fromkeys((*extract, *coded))),
                                                                 ends=starts + lengths)
    if not ascii:
        try:
            keys.validate(full=True)
            values.validate(full=True)
        except pa.ArrowInvalid:
            return parse_properties(to_utf8(slices_to_binary(buf, starts, lengths)), extract, coded)
    return _map(keys, values, map_offsets, named, extract, coded)


def _map(keys, values, map_offsets, named, extract, coded=()):
    props = pa.MapArray.from_arrays(pa.array(map_offsets), keys, values)
    if not extract and not coded:
        return props
    columns = {name: values.take(pa.array(named[name], mask=named[name] < 0)) for name in extract}
    if not coded:
        return props, columns
    dictionaries = {}
    for name in coded:
        codes, first, ok = K.value_codes(values, named[name], len(map_offsets) // 2)
        dictionaries[name] = (pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0),
                                                             values.take(pa.array(first))) if ok
                              else columns[name] if name in columns
                              else values.take(pa.array(named[name], mask=named[name] < 0)))
    return props, columns, dictionaries


def properties_to_blob(props: Mapping[str, Any]) -> str:
    """Encode a dict the way 4.9.x's messageProperties2String does (no separator after the last pair)."""
    return "\x02".join(f"{k}\x01{v}" for k, v in props.items() if v is not None)
