#!/usr/bin/env python3
"""A recording TCP proxy for fuzz seeds: forwards every client connection to a Kafka broker and
writes each request frame the client sends (header + body, without the 4-byte size) to a file in
OUT_DIR named <api key>-<api version>-<sha1 prefix>. Duplicates collapse by content.

Usage: record_proxy.py LISTEN_PORT BROKER_HOST:BROKER_PORT OUT_DIR
Runs until killed. Standard library only.
"""
import hashlib
import os
import socket
import struct
import sys
import threading

FRAME_BYTES_MAX = 16 * 1024 * 1024  # seeds bigger than this are not kept


def pump(src, dst, record):
    buf = b""
    try:
        while True:
            chunk = src.recv(65536)
            if not chunk:
                break
            dst.sendall(chunk)
            if record is None:
                continue
            buf += chunk
            while len(buf) >= 4:
                (size,) = struct.unpack(">i", buf[:4])
                if size < 0 or size > FRAME_BYTES_MAX:
                    record = None  # not a stream we can cut; keep forwarding only
                    break
                if len(buf) < 4 + size:
                    break
                frame, buf = buf[4 : 4 + size], buf[4 + size :]
                record(frame)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    listen_port, broker, out_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    host, port = broker.rsplit(":", 1)
    os.makedirs(out_dir, exist_ok=True)

    def record(frame):
        if len(frame) < 4:
            return
        key, version = struct.unpack(">hh", frame[:4])
        name = "%d-%d-%s" % (key, version, hashlib.sha1(frame).hexdigest()[:16])
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(frame)

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen_port))
    server.listen(64)
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection((host, int(port)))
        threading.Thread(target=pump, args=(client, upstream, record), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, None), daemon=True).start()


if __name__ == "__main__":
    main()
