"""Socket addresses as Java prints them (`InetAddress.getHostAddress() + ":" + port`), over whole columns."""
import ipaddress

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def java_host_address(ip: bytes) -> str:
    """Java's text for a 4- or 16-byte address: IPv6 as 8 lowercase hex groups, uncompressed, no zero
    padding; an IPv4-mapped IPv6 address becomes an Inet4Address (InetAddress.getByAddress does that)."""
    if len(ip) == 16 and ip[:10] == b"\0" * 10 and ip[10:12] == b"\xff\xff":
        ip = ip[12:]
    if len(ip) == 4:
        return str(ipaddress.IPv4Address(ip))
    return ":".join(f"{int.from_bytes(ip[i:i + 2], 'big'):x}" for i in range(0, 16, 2))


def format_hosts(ip_rows: np.ndarray, is_v6: np.ndarray, ports: np.ndarray) -> pa.Array:
    """'ip:port' strings for a (N, 16) uint8 matrix (IPv4 rows use the first 4 bytes), a bool array and ports.

    Distinct addresses are few (brokers, client hosts), so only those go through Python."""
    n = len(ports)
    if n == 0:
        return pa.array([], pa.string())
    keyed = np.concatenate([is_v6.astype(np.uint8)[:, None], ip_rows], axis=1)
    keyed = np.ascontiguousarray(keyed).view(np.dtype((np.void, 17))).reshape(n)
    uniq, inverse = np.unique(keyed, return_inverse=True)
    texts = []
    for u in uniq:
        raw = bytes(u)
        texts.append(java_host_address(raw[1:17] if raw[0] else raw[1:5]))
    ip_text = pa.array(texts, pa.string()).take(pa.array(inverse.reshape(-1).astype(np.int32)))
    return pc.binary_join_element_wise(ip_text, pc.cast(pa.array(ports), pa.string()), ":")
