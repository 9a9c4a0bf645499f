#!/usr/bin/env python3
"""Delays every packet of one netfilter queue (NFQUEUE) by a fixed time.

deploy/regions/regions.sh uses it in place of `tc ... netem delay` on kernels
built without netem (CONFIG_NET_SCH_NETEM): an iptables rule sends a
namespace's incoming packets to the queue, and this process hands each back
to the kernel (NF_ACCEPT) once it has waited its delay, in arrival order.

    netdelay.py QUEUE DELAY_FILE

DELAY_FILE holds the delay in milliseconds; SIGHUP reads it again, SIGTERM
releases every packet held and exits. Only the packets' metadata crosses to
this process (NFQNL_COPY_META), large GSO packets stay whole (NFQA_CFG_F_GSO),
and one batch verdict releases every packet that is due. Talks netlink
directly: no library beyond Python's standard one.
"""

import collections
import errno
import os
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_GSO = 4
NF_ACCEPT = 1
QUEUE_MAXLEN = 65536


def attribute(kind, payload):
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def message(kind, queue, attributes, flags=NLM_F_REQUEST, seq=0):
    # nfgenmsg: family (AF_UNSPEC), version (NFNETLINK_V0), res_id (the queue, big-endian).
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack(">H", queue) + b"".join(attributes)
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


def configure(sock, queue, attributes, seq):
    sock.send(message(NFQNL_MSG_CONFIG, queue, attributes, NLM_F_REQUEST | NLM_F_ACK, seq))
    while True:
        data = sock.recv(65536)
        offset = 0
        while offset + 16 <= len(data):
            length, kind, _, reply_seq, _ = struct.unpack_from("=IHHII", data, offset)
            if kind == NLMSG_ERROR and reply_seq == seq:
                (error,) = struct.unpack_from("=i", data, offset + 16)
                if error:
                    raise OSError(-error, "nfqueue configuration: " + os.strerror(-error))
                return
            offset += (length + 3) & ~3


def read_delay(path):
    with open(path) as f:
        return max(0.0, float(f.read().strip())) / 1000.0


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    queue = int(sys.argv[1])
    delay_file = sys.argv[2]
    delay = read_delay(delay_file)

    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.bind((0, 0))
    for option, size in ((33, 8 << 20), (socket.SO_RCVBUF, 8 << 20)):  # 33: SO_RCVBUFFORCE (root)
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, size)
            break
        except OSError:
            pass
    sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
    configure(sock, queue, [attribute(NFQA_CFG_CMD, struct.pack(">BxH", NFQNL_CFG_CMD_BIND, 0))], 1)
    configure(sock, queue, [attribute(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META))], 2)
    configure(sock, queue, [attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", QUEUE_MAXLEN))], 3)
    configure(
        sock,
        queue,
        [attribute(NFQA_CFG_MASK, struct.pack(">I", NFQA_CFG_F_GSO)), attribute(NFQA_CFG_FLAGS, struct.pack(">I", NFQA_CFG_F_GSO))],
        4,
    )
    print(f"netdelay: queue {queue} bound, delay {delay * 1000:g} ms", flush=True)

    pending = collections.deque()  # (due, packet id), in arrival order
    state = {"reload": False, "stop": False}
    signal.signal(signal.SIGHUP, lambda *_: state.update(reload=True))
    signal.signal(signal.SIGTERM, lambda *_: state.update(stop=True))
    signal.signal(signal.SIGINT, lambda *_: state.update(stop=True))
    sock.setblocking(False)
    # Signals wake the poll below (Python would otherwise resume it).
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    poller.register(wake_read, select.POLLIN)
    packet_kind = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
    buffer = bytearray(65536)

    def release(up_to):
        verdict = attribute(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, up_to))
        try:
            sock.send(message(NFQNL_MSG_VERDICT_BATCH, queue, [verdict]))
        except BlockingIOError:
            select.select([], [sock], [])
            sock.send(message(NFQNL_MSG_VERDICT_BATCH, queue, [verdict]))

    while True:
        if state["reload"]:
            state["reload"] = False
            try:
                delay = read_delay(delay_file)
                print(f"netdelay: delay {delay * 1000:g} ms", flush=True)
            except (OSError, ValueError) as e:
                print(f"netdelay: keeping {delay * 1000:g} ms: {e}", flush=True)
        if state["stop"]:
            if pending:
                release(pending[-1][1])
            return
        timeout = -1
        if pending:
            timeout = max(0, int((pending[0][0] - time.monotonic()) * 1000 + 0.999))
        try:
            events = poller.poll(timeout)
        except InterruptedError:
            events = []
        if any(fd == wake_read for fd, _ in events):
            try:
                os.read(wake_read, 512)
            except BlockingIOError:
                pass
        if any(fd == sock.fileno() for fd, _ in events):
            now = time.monotonic()
            while True:
                try:
                    size = sock.recv_into(buffer)
                except BlockingIOError:
                    break
                except OSError as e:
                    if e.errno == errno.ENOBUFS:
                        continue
                    raise
                offset = 0
                while offset + 20 <= size:
                    length, kind = struct.unpack_from("=IH", buffer, offset)
                    if length < 16:
                        break
                    if kind == packet_kind:
                        at = offset + 20
                        end = offset + length
                        while at + 4 <= end:
                            attr_length, attr_kind = struct.unpack_from("=HH", buffer, at)
                            if attr_length < 4:
                                break
                            if attr_kind & 0x3FFF == NFQA_PACKET_HDR:
                                (packet_id,) = struct.unpack_from(">I", buffer, at + 4)
                                pending.append((now + delay, packet_id))
                                break
                            at += (attr_length + 3) & ~3
                    offset += (length + 3) & ~3
        now = time.monotonic()
        last = None
        while pending and pending[0][0] <= now:
            last = pending.popleft()[1]
        if last is not None:
            release(last)


if __name__ == "__main__":
    main()
