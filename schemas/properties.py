"""Message properties (`name \\x01 value \\x02 ...`) into an Arrow map column, as 4.9.x decodes them.

`MessageDecoder.string2messageProperties` keeps a piece only when it has a name and a value: the name
is what precedes the first \\x01 and must be non-empty, the value (the rest, \\x01 included) must be
non-empty; everything else is dropped. A repeated name keeps its last value (HashMap.put).
"""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())


def parse_properties(blobs, extract=()):
    """map<string, string> per row from a string array of raw property blobs (order of appearance).

    Works on the bytes of the whole column at once: \x01 and \x02 never occur inside a multi-byte
    UTF-8 sequence, so separator positions found with numpy are character boundaries. With `extract`
    (names such as "TAGS"), also returns {name: string column of that property's value per row}."""
    from schemas.columns import slices_to_binary

    n = len(blobs)
    offsets = np.frombuffer(blobs.buffers()[1], dtype=np.int32)[blobs.offset: blobs.offset + n + 1].astype(np.int64)
    data = np.frombuffer(blobs.buffers()[2], dtype=np.uint8) if n and blobs.buffers()[2] is not None \
        else np.zeros(0, np.uint8)
    lo, hi = (int(offsets[0]), int(offsets[-1])) if n else (0, 0)
    region = data[lo:hi]
    seps = np.flatnonzero(region == 2) + lo
    # pieces: from a blob's start or after a \x02, up to the next \x02 or the blob's end (two sorted runs:
    # the stable sort merges them in linear time)
    starts = np.sort(np.concatenate([offsets[:-1], seps + 1]), kind="stable")
    ends = np.sort(np.concatenate([seps, offsets[1:]]), kind="stable")
    ones = np.flatnonzero(region == 1) + lo
    at = np.searchsorted(ones, starts)
    kv = np.where(at < len(ones), ones[np.minimum(at, max(len(ones) - 1, 0))] if len(ones) else 0, hi + 1)
    valid = (kv > starts) & (kv < ends - 1)  # a name, a \x01, and a value: else RocketMQ drops the piece
    starts, ends, kv = starts[valid], ends[valid], kv[valid]
    parents = np.searchsorted(offsets, starts, side="right") - 1
    keys = slices_to_binary(data, starts, kv - starts, pa.string())
    values = slices_to_binary(data, kv + 1, ends - kv - 1, pa.string())
    keys, values, parents = _last_value_wins(keys, values, parents)
    counts = np.bincount(parents, minlength=n) if len(parents) else np.zeros(n, np.int64)
    map_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=map_offsets[1:])
    props = pa.MapArray.from_arrays(pa.array(map_offsets), keys, values)
    if not extract:
        return props
    columns = {}
    for name in extract:
        hit = pc.equal(keys, name).to_numpy(zero_copy_only=False)
        index = np.full(n, -1, dtype=np.int64)
        index[parents[hit]] = np.flatnonzero(hit)
        columns[name] = values.take(pa.array(index, mask=index < 0))
    return props, columns


def _has_repeated_name(codes, parents):
    """Whether a message repeats a name: compare each entry with the few before it in the same message
    (messages hold a handful of properties, so this is a few vector compares, no sort or hash)."""
    longest = int(np.bincount(parents).max()) if len(parents) else 0
    for d in range(1, longest):
        if ((parents[d:] == parents[:-d]) & (codes[d:] == codes[:-d])).any():
            return True
    return False


def _last_value_wins(keys, values, parents):
    """Drop all but the last occurrence of a name within a message (rare: a producer sends a map)."""
    if len(keys) < 2:
        return keys, values, parents
    codes = pc.dictionary_encode(keys).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    if not _has_repeated_name(codes, parents):
        return keys, values, parents
    composite = parents.astype(np.int64) * (int(codes.max()) + 1) + codes
    # the last occurrence of each (message, name), in place of the first one, keeping the first's position
    rev_first = len(composite) - 1 - np.unique(composite[::-1], return_index=True)[1]
    first_pos = np.unique(composite, return_index=True)[1]
    order = np.argsort(first_pos)
    take_values = rev_first[order]
    take_keys = first_pos[order]
    return keys.take(pa.array(take_keys)), values.take(pa.array(take_values)), parents[take_keys]


def properties_to_blob(props):
    """Encode a dict the way 4.9.x's messageProperties2String does (no separator after the last pair)."""
    return "\x02".join(f"{k}\x01{v}" for k, v in props.items() if v is not None)


def properties_reference(blob):
    """Row-at-a-time reference: 4.9.x `string2messageProperties`, as plainly as it reads in Java."""
    out = {}
    index, length = 0, len(blob)
    while index < length:
        new_index = blob.find("\x02", index)
        if new_index < 0:
            new_index = length
        if new_index - index >= 3:
            kv = blob.find("\x01", index)
            if index < kv < new_index - 1:
                out[blob[index:kv]] = blob[kv + 1:new_index]
        index = new_index + 1
    return out
