"""The compiled record decode agrees with a plain row-at-a-time reading of the same bytes.

store_a holds no IPv6 store hosts and no v2 records, so these are generated: random hosts (IPv4, IPv6,
IPv4-mapped IPv6), ports, offsets and both magic codes, encoded by the writer."""
import ipaddress
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.log import layout as L
from schemas.log.records import decode_records
from tools.store_writer import Message, encode_record

_v4 = st.builds(lambda b: str(ipaddress.IPv4Address(b)), st.binary(min_size=4, max_size=4))
_v6 = st.builds(lambda b: str(ipaddress.IPv6Address(b)), st.binary(min_size=16, max_size=16))
_mapped = st.builds(lambda b: "::ffff:" + str(ipaddress.IPv4Address(b)), st.binary(min_size=4, max_size=4))
_host = st.builds(lambda ip, port: f"{ip}:{port}", st.one_of(_v4, _v6, _mapped), st.integers(0, 65535))
_message = st.builds(
    lambda topic, born, store, offset, magic, body: (Message(
        topic, 1, body, {"TAGS": "t", "KEYS": "k"}, born_host=born, store_host=store, born_timestamp=1,
        store_timestamp=2, magic=magic), offset),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20),
    _host, _host, st.integers(0, 2**62), st.sampled_from([L.MAGIC_V1, L.MAGIC_V2]), st.binary(max_size=40))


def _java_text(ip):
    """InetAddress.getHostAddress as Java 8-17 print it: IPv4 dotted; IPv6 as 8 lowercase hex groups,
    never compressed; an IPv4-mapped IPv6 address is an Inet4Address (InetAddress.getByAddress)."""
    address = ipaddress.ip_address(ip)
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.version == 4:
        return ".".join(str(b) for b in address.packed)
    return ":".join(f"{group:x}" for group in struct.unpack(">8H", address.packed))


def _reference(msg, physical_offset):
    """What MessageDecoder gives for these fields, computed the slow, obvious way."""
    def text(host):
        ip, _, port = host.rpartition(":")
        return f"{_java_text(ip)}:{int(port)}"
    store_ip, _, store_port = msg.store_host.rpartition(":")
    raw = ipaddress.ip_address(store_ip).packed + struct.pack(">i", int(store_port))
    return {"born_host": text(msg.born_host), "store_host": text(msg.store_host),
            "msg_id": (raw + struct.pack(">q", physical_offset)).hex().upper(), "topic": msg.topic,
            "body": msg.body}


@settings(max_examples=60, deadline=None)
@given(st.lists(_message, min_size=1, max_size=30))
def test_compiled_decode_matches_row_reference_on_any_hosts_and_magic(messages):
    records = [encode_record(m, offset, i) for i, (m, offset) in enumerate(messages)]
    starts = np.cumsum([0] + [len(r) for r in records[:-1]])
    batch = decode_records(np.frombuffer(b"".join(records), np.uint8), starts).to_pylist()
    for row, (m, offset) in zip(batch, messages):
        expected = _reference(m, offset)
        assert {k: row[k] for k in expected} == expected


def test_repeated_hosts_reuse_their_text_without_mixing_ports():
    hosts = ["10.0.0.7:5555", "10.0.0.7:5555", "10.0.0.7:5556", "10.0.0.7:5555", "255.255.255.255:65535"]
    records = [encode_record(Message("T", 0, b"x", {}, born_host=h), 0, i) for i, h in enumerate(hosts)]
    starts = np.cumsum([0] + [len(r) for r in records[:-1]])
    batch = decode_records(np.frombuffer(b"".join(records), np.uint8), starts)
    assert batch.column("born_host").to_pylist() == hosts


@pytest.mark.parametrize("cut", [4, 60, -1])
def test_record_cut_short_names_its_offset(cut):
    from schemas.errors import CorruptStoreError

    record = encode_record(Message("T", 0, b"body", {"a": "1"}), 0, 0)
    buf = np.frombuffer(record + record[:cut], np.uint8)  # the second copy lacks its tail
    with pytest.raises(CorruptStoreError) as err:
        decode_records(buf, np.array([0, len(record)]), base_offset=1000)
    assert err.value.offset == 1000 + len(record)
