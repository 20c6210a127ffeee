"""A minimal PostgreSQL wire-protocol client for tests that must see exact bytes and SQLSTATEs:
startup, md5 and SCRAM-SHA-256 login, simple queries, raw frames. Standard library only."""
import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct


class WireError(Exception):
    def __init__(self, fields):
        self.fields = fields
        super().__init__("%s %s" % (fields.get("C"), fields.get("M")))

    @property
    def sqlstate(self):
        return self.fields.get("C")


def error_fields(body):
    fields = {}
    for part in body.split(b"\0"):
        if part:
            fields[chr(part[0])] = part[1:].decode("utf-8", "replace")
    return fields


def startup_packet(user, database="postgres", params=None, version=196608):
    body = struct.pack("!I", version)
    items = {"user": user, "database": database}
    items.update(params or {})
    for key, value in items.items():
        body += key.encode() + b"\0" + value.encode() + b"\0"
    body += b"\0"
    return struct.pack("!I", len(body) + 4) + body


def message(kind, body=b""):
    return kind + struct.pack("!I", len(body) + 4) + body


def cstr(text):
    return text.encode() + b"\0"


# Extended-protocol messages (text format throughout).
def parse(name, sql, types=()):
    return message(b"P", cstr(name) + cstr(sql) + struct.pack("!H", len(types)) +
                   b"".join(struct.pack("!I", t) for t in types))


def bind(stmt, params=(), portal=""):
    body = cstr(portal) + cstr(stmt) + struct.pack("!H", 0) + struct.pack("!H", len(params))
    for p in params:
        body += struct.pack("!i", -1) if p is None else struct.pack("!I", len(p.encode())) + p.encode()
    return message(b"B", body + struct.pack("!H", 0))


def describe(kind, name):
    return message(b"D", kind.encode() + cstr(name))


def execute(portal="", max_rows=0):
    return message(b"E", cstr(portal) + struct.pack("!I", max_rows))


def close(kind, name):
    return message(b"C", kind.encode() + cstr(name))


SYNC = message(b"S")
FLUSH = message(b"H")


def data_row(body):
    (count,) = struct.unpack("!H", body[:2])
    offset, row = 2, []
    for _ in range(count):
        (length,) = struct.unpack("!i", body[offset:offset + 4])
        offset += 4
        if length < 0:
            row.append(None)
        else:
            row.append(body[offset:offset + length].decode())
            offset += length
    return row


class Wire:
    def __init__(self, port, host="127.0.0.1", timeout=15):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.params = {}
        self.key = None

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return False
            self.buf += chunk
        return True

    def read_bytes(self, n):
        """Exactly n raw bytes, or None at EOF."""
        if not self._fill(n):
            return None
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_message(self):
        """(type, body) or None at EOF."""
        if not self._fill(5):
            return None
        kind = self.buf[:1]
        (length,) = struct.unpack("!I", self.buf[1:5])
        if not self._fill(1 + length):
            return None
        body = self.buf[5:1 + length]
        self.buf = self.buf[1 + length:]
        return kind, body

    def read_until_ready(self):
        """Messages up to and including ReadyForQuery; raises WireError for an ErrorResponse seen
        before it (after draining to ReadyForQuery or EOF)."""
        messages, error = [], None
        while True:
            msg = self.read_message()
            if msg is None:
                if error:
                    raise WireError(error)
                raise EOFError("connection closed before ReadyForQuery")
            messages.append(msg)
            if msg[0] == b"S":
                name, value = msg[1][:-1].split(b"\0", 1)
                self.params[name.decode()] = value.rstrip(b"\0").decode()
            if msg[0] == b"E" and error is None:
                error = error_fields(msg[1])
            if msg[0] == b"Z":
                if error:
                    raise WireError(error)
                return messages

    def login(self, user, database="postgres", password=None, params=None, channel_binding=None):
        """channel_binding: tls-server-end-point bytes to send with SCRAM-SHA-256-PLUS (over TLS)."""
        self.send(startup_packet(user, database, params))
        scram = None
        while True:
            msg = self.read_message()
            if msg is None:
                raise EOFError("connection closed during login")
            kind, body = msg
            if kind == b"E":
                raise WireError(error_fields(body))
            if kind == b"R":
                (code,) = struct.unpack("!I", body[:4])
                if code == 0:
                    continue
                if code == 3:
                    self.send(message(b"p", password.encode() + b"\0"))
                elif code == 5:
                    inner = hashlib.md5(password.encode() + user.encode()).hexdigest()
                    outer = hashlib.md5(inner.encode() + body[4:8]).hexdigest()
                    self.send(message(b"p", b"md5" + outer.encode() + b"\0"))
                elif code == 10:
                    scram = _Scram(password, channel_binding)
                    first = scram.client_first()
                    mechanism = b"SCRAM-SHA-256-PLUS\0" if channel_binding is not None else b"SCRAM-SHA-256\0"
                    self.send(message(b"p", mechanism + struct.pack("!I", len(first)) + first))
                elif code == 11:
                    self.send(message(b"p", scram.client_final(body[4:])))
                elif code == 12:
                    scram.verify(body[4:])
                continue
            if kind == b"S":
                name, value = body[:-1].split(b"\0", 1)
                value = value.rstrip(b"\0")
                self.params[name.decode()] = value.decode()
            elif kind == b"K":
                # (pid, secret): the secret an int for protocol 3.0's 4 bytes, bytes for 3.2's longer key
                pid = struct.unpack("!I", body[:4])[0]
                self.key = (pid, struct.unpack("!I", body[4:])[0] if len(body) == 8 else body[4:])
            elif kind == b"Z":
                return

    def query(self, sql):
        """Rows as lists of str/None, from a simple query."""
        self.send(message(b"Q", sql.encode() + b"\0"))
        return [data_row(body) for kind, body in self.read_until_ready() if kind == b"D"]

    def exchange(self, *messages):
        """Sends messages (ending with a Sync) and reads to ReadyForQuery. Returns (the reply types as
        one string, the data rows, the first error's SQLSTATE or None, the ReadyForQuery status)."""
        self.send(b"".join(messages))
        kinds, rows, sqlstate = "", [], None
        while True:
            msg = self.read_message()
            if msg is None:
                raise EOFError("connection closed before ReadyForQuery (got %r)" % kinds)
            kind, body = msg
            kinds += kind.decode()
            if kind == b"D":
                rows.append(data_row(body))
            elif kind == b"E" and sqlstate is None:
                sqlstate = error_fields(body).get("C")
            elif kind == b"Z":
                return kinds, rows, sqlstate, body.decode()

    def query_rows_after_send(self):
        """Rows of a query already sent (see query)."""
        return [m for m in self.read_until_ready() if m[0] == b"D"]

    def errors_until_close(self):
        """Reads until EOF; returns the fields of every ErrorResponse."""
        errors = []
        while True:
            try:
                msg = self.read_message()
            except (ConnectionResetError, socket.timeout, ssl.SSLError):
                return errors
            if msg is None:
                return errors
            if msg[0] == b"E":
                errors.append(error_fields(msg[1]))

    def expect_error_and_close(self):
        """Reads until EOF; returns the fields of the first ErrorResponse (None if there was none)."""
        errors = self.errors_until_close()
        return errors[0] if errors else None


class _Scram:
    def __init__(self, password, channel_binding=None):
        self.password = password.encode()
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.gs2 = "n,," if channel_binding is None else "p=tls-server-end-point,,"
        self.cbind = base64.b64encode(self.gs2.encode() + (channel_binding or b"")).decode()

    def client_first(self):
        self.first_bare = "n=,r=" + self.nonce
        return (self.gs2 + self.first_bare).encode()

    def client_final(self, server_first):
        self.server_first = server_first.decode()
        attrs = dict(part.split("=", 1) for part in self.server_first.split(","))
        salt = base64.b64decode(attrs["s"])
        salted = hashlib.pbkdf2_hmac("sha256", self.password, salt, int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
        stored_key = hashlib.sha256(client_key).digest()
        without_proof = "c=%s,r=%s" % (self.cbind, attrs["r"])
        auth_message = ",".join([self.first_bare, self.server_first, without_proof]).encode()
        signature = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
        self.expected = hmac.new(server_key, auth_message, hashlib.sha256).digest()
        return (without_proof + ",p=" + base64.b64encode(proof).decode()).encode()

    def verify(self, server_final):
        text = server_final.decode()
        if base64.b64decode(text.split("=", 1)[1]) != self.expected:
            raise AssertionError("server signature mismatch")


def scram_secret(password, salt=b"tern-test-salt16", iterations=4096):
    """The text PostgreSQL stores for a SCRAM password (for userlist.txt)."""
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = lambda b: base64.b64encode(b).decode()
    return "SCRAM-SHA-256$%d:%s$%s:%s" % (iterations, b64(salt), b64(stored_key), b64(server_key))
