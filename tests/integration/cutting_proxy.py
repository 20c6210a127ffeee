"""A TCP relay in front of a real PostgreSQL that cuts a connection at an exact message of the server's
answer (fault injection at a byte offset, which no installable server does). Standard library only.

A client (here: tern, on behalf of a test's client) asks for a cut by putting a marker in the text it
sends: `/*cut:after=1*/` cuts the server's answer right after its first ParseComplete, `after=D2` after
the second DataRow, `in=D2` in the middle of the second DataRow (half its bytes go, then the cut). The
types count from the first server message after the marker went by; the server gets everything the
client sent, so a write may well commit (its outcome is unknown to the client, which is the point). A
marker is cut once: the same text sent again (a re-run after the recovery) passes whole.

`/*cut:split=T*/` cuts no connection: the answer's first RowDescription goes in two writes, its first
three bytes and, once the receiver has had them a while (SPLIT_PAUSE_S), the rest, so the proxy's client
(tern) reads the message in two receives; everything else passes as it comes.

    with CuttingProxy(pg.primary_port) as proxy:   # proxy.port instead of the server's
        ...
        proxy.cuts   # the markers cut so far

Threads: one accept thread, two pumps per connection; stop() closes everything."""
import re
import socket
import struct
import threading
import time

MARKER = re.compile(rb"/\*cut:(after|in|split)=([A-Za-z0-9])(\d*)[^*]*\*/")
# Between the two writes of a split message: the receiver's read of the first is armed already (tern keeps
# a receive armed while it waits for an answer), so this only has to outlast one loopback delivery.
SPLIT_PAUSE_S = 0.05


class CuttingProxy:
    def __init__(self, upstream_port, host="127.0.0.1"):
        self.upstream = (host, upstream_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.cuts = []       # the marker texts cut, in order
        self._seen = set()   # ... and as a set
        self._conns = []
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self):
        self._stopped = True
        try:
            self.sock.close()
        except OSError:
            pass
        with self.lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self):
        while not self._stopped:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self._conns += [client, server]
            state = {"spec": None}
            threading.Thread(target=self._client_to_server, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(client, server, state), daemon=True).start()

    @staticmethod
    def _close(*socks):
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass

    def _client_to_server(self, client, server, state):
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                for m in MARKER.finditer(data):
                    text = m.group(0)
                    with self.lock:
                        if text in self._seen:
                            continue
                        self._seen.add(text)
                    # (set before the bytes go: the answer comes after them)
                    state["spec"] = (m.group(1).decode(), m.group(2), int(m.group(3) or 1), text.decode())
                server.sendall(data)
        except OSError:
            pass
        self._close(server)

    def _server_to_client(self, client, server, state):
        buf = b""
        counts = {}
        armed = None
        started = False  # the first message came (before it, a lone 'N' may answer an SSLRequest)
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                buf += data
                out = b""
                while not started and buf[:1] == b"N":  # the refusal of an SSLRequest or GSSENCRequest
                    out, buf = out + buf[:1], buf[1:]
                started = started or len(buf) > 0
                while len(buf) >= 5:
                    (length,) = struct.unpack("!I", buf[1:5])
                    if len(buf) < 1 + length:
                        break
                    msg, buf = buf[:1 + length], buf[1 + length:]
                    if armed is None and state["spec"] is not None:
                        armed, state["spec"] = state["spec"], None
                        counts = {}
                    if armed is not None:
                        how, kind, nth, text = armed
                        if msg[:1] == kind:
                            counts[kind] = counts.get(kind, 0) + 1
                            if counts[kind] == nth and how == "split":
                                client.sendall(out + msg[:3])
                                time.sleep(SPLIT_PAUSE_S)
                                out, msg, armed = b"", msg[3:], None
                                with self.lock:
                                    self.cuts.append(text)
                            elif counts[kind] == nth:
                                out += msg if how == "after" else msg[:max(1, len(msg) // 2)]
                                client.sendall(out)
                                with self.lock:
                                    self.cuts.append(text)
                                self._close(client, server)
                                return
                    out += msg
                if out:
                    client.sendall(out)
            if buf:
                client.sendall(buf)
        except OSError:
            pass
        self._close(client)
