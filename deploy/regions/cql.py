#!/usr/bin/env python3
"""Runs one CQL query against a Cassandra node and prints its rows, one a line.

    cql.py HOST[:PORT] 'SELECT data_center FROM system.local'

No driver, no cqlsh: the native protocol v4 over a plain socket (no login, no
TLS), enough for the system tables (text, inet, uuid, int, bigint, boolean,
timestamp, and sets, lists and maps of them; other types print as hex).
deploy/regions/check.sh uses it to show which datacenter each node is in.
"""

import ipaddress
import socket
import struct
import sys
import uuid

VERSION = 4
OP_ERROR, OP_STARTUP, OP_READY, OP_QUERY, OP_RESULT = 0x00, 0x01, 0x02, 0x07, 0x08
RESULT_ROWS = 0x0002


def frame(opcode, body, stream=1):
    return struct.pack(">BBhBi", VERSION, 0, stream, opcode, len(body)) + body


def string(s):
    data = s.encode()
    return struct.pack(">H", len(data)) + data


def long_string(s):
    data = s.encode()
    return struct.pack(">i", len(data)) + data


def read_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the node closed the connection")
        data += chunk
    return data


def exchange(sock, opcode, body):
    sock.sendall(frame(opcode, body))
    _, _, _, reply, length = struct.unpack(">BBhBi", read_exactly(sock, 9))
    payload = read_exactly(sock, length)
    if reply == OP_ERROR:
        code = struct.unpack_from(">i", payload)[0]
        (size,) = struct.unpack_from(">H", payload, 4)
        raise RuntimeError(f"error 0x{code:04x}: {payload[6:6 + size].decode()}")
    return reply, payload


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, fmt):
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def string(self):
        n = self.take(">H")
        self.at += n
        return self.data[self.at - n:self.at].decode()

    def bytes(self):
        n = self.take(">i")
        if n < 0:
            return None
        self.at += n
        return self.data[self.at - n:self.at]

    def option(self):
        kind = self.take(">H")
        if kind == 0x0000:
            return ("custom", self.string())
        if kind in (0x0020, 0x0022):
            return (kind, self.option())
        if kind == 0x0021:
            return (kind, self.option(), self.option())
        if kind in (0x0030, 0x0031):
            raise RuntimeError("user types and tuples are beyond this small client")
        return (kind,)


def decode(option, value):
    if value is None:
        return "null"
    kind = option[0]
    if kind in (0x0001, 0x000D):
        return value.decode()
    if kind == 0x0010:
        return str(ipaddress.ip_address(value))
    if kind in (0x000C, 0x000F):
        return str(uuid.UUID(bytes=value))
    if kind in (0x0002, 0x0009, 0x000B, 0x0013, 0x0014):
        return str(int.from_bytes(value, "big", signed=True))
    if kind == 0x0004:
        return "true" if value != b"\0" else "false"
    if kind in (0x0020, 0x0022, 0x0021):
        r = Reader(value)
        n = r.take(">i")
        if kind == 0x0021:
            items = [f"{decode(option[1], r.bytes())}: {decode(option[2], r.bytes())}" for _ in range(n)]
            return "{" + ", ".join(items) + "}"
        items = [decode(option[1], r.bytes()) for _ in range(n)]
        return ("[" if kind == 0x0020 else "{") + ", ".join(items) + ("]" if kind == 0x0020 else "}")
    return "0x" + value.hex()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    host, _, port = sys.argv[1].rpartition(":") if ":" in sys.argv[1] else (sys.argv[1], "", "9042")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        reply, _ = exchange(sock, OP_STARTUP, struct.pack(">H", 1) + string("CQL_VERSION") + string("3.0.0"))
        if reply != OP_READY:
            sys.exit("the node wants a login: this client has none")
        # Consistency ONE, no flags.
        _, payload = exchange(sock, OP_QUERY, long_string(sys.argv[2]) + struct.pack(">HB", 0x0001, 0))
    r = Reader(payload)
    if r.take(">i") != RESULT_ROWS:
        print("(done)")
        return
    flags, count = r.take(">ii")
    if flags & 0x0002:
        r.bytes()
    global_spec = flags & 0x0001
    if global_spec:
        r.string(), r.string()
    columns = []
    for _ in range(count):
        if not global_spec:
            r.string(), r.string()
        columns.append((r.string(), r.option()))
    print(" | ".join(name for name, _ in columns))
    for _ in range(r.take(">i")):
        print(" | ".join(decode(option, r.bytes()) for _, option in columns))


if __name__ == "__main__":
    main()
