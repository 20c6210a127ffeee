"""A protocol-level fake of a server speaking the XID-import (`polar`) profile, which no installable
PostgreSQL does (issue 11, ../shared/reference/000_067b628b093530ef.txt). It answers, over the real wire
protocol, just what tern and a test send it:

- startup (SSLRequest and GSSENCRequest refused with 'N'), trust authentication, ParameterStatus,
  BackendKeyData; a startup parameter `_polar_send_xact` turns the profile on for that connection;
- simple-protocol Queries of one or more statements: BEGIN/START, COMMIT/END, ROLLBACK/ABORT, SET
  (`name = value` / `TO`), RESET (a name, ALL), SHOW, INSERT/UPDATE/DELETE (a write: refused with 25006
  on a standby; in a transaction it gets an XID, and a text naming `wal_pending` leaves its WAL
  unflushed), and SELECTs of a list of `pg_is_in_recovery()`, `current_setting('name')` and quoted
  literals; tern's monitor and probe queries get a fixed LSN;
- `WAIT FOR LSN` when its server_version is 19 or later, answered with a set status;
- the profile's ReadyForQuery: the status byte, then the marker ('x' splittable, 'w' its own WAL not
  flushed), then the transaction's XIDs as text ("command id,xid", empty before its first write),
  NUL-terminated. tern reads this layout (core/session_relay.c, relay_count_ready).

Every statement a connection runs is kept in `statements` as (connection number, text), so a test can
check what reached which server. Threads: one per connection; stop() closes them all."""
import socket
import struct
import threading

LSN = "0/3000000"


class FakePolarServer:
    def __init__(self, is_standby, name, version="15.0", lsn=LSN, wait_status="success"):
        """version: its server_version (19.0 has WAIT FOR LSN, answered with wait_status); lsn: what it
        reports as its WAL position (a standby's replay LSN)."""
        self.is_standby = is_standby
        self.name = name
        self.version = version
        self.lsn = lsn
        self.wait_status = wait_status
        self.statements = []  # (connection number, statement text)
        self.polar_connections = 0
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        self.conns = []
        self.next_xid = 1000
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self):
        self.stopped = True
        self.sock.close()
        for c in list(self.conns):
            try:
                c.close()
            except OSError:
                pass

    def seen(self, conn_no=None):
        with self.lock:
            return [text for n, text in self.statements if conn_no is None or n == conn_no]

    def _accept(self):
        number = 0
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            number += 1
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    # ---- the wire ----

    @staticmethod
    def _read(conn, n):
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    @staticmethod
    def _msg(kind, body=b""):
        return kind + struct.pack("!I", len(body) + 4) + body

    def _serve(self, conn, number):
        try:
            self._session(conn, number)
        except (EOFError, OSError):
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def _session(self, conn, number):
        while True:
            length, code = struct.unpack("!II", self._read(conn, 8))
            rest = self._read(conn, length - 8)
            if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest
                conn.sendall(b"N")
                continue
            if code == 80877102:  # CancelRequest
                return
            break
        parts = rest.split(b"\0")
        params = dict(zip((p.decode() for p in parts[0::2]), (p.decode() for p in parts[1::2])))
        polar = "_polar_send_xact" in params
        if polar:
            with self.lock:
                self.polar_connections += 1
        state = {"tx": "I", "xid": None, "cid": 0, "wal_pending": False, "settings": {}, "polar": polar}
        out = self._msg(b"R", struct.pack("!I", 0))
        for key, value in (("server_version", self.version), ("server_encoding", "UTF8"), ("client_encoding", "UTF8"),
                           ("DateStyle", "ISO, MDY"), ("integer_datetimes", "on"), ("IntervalStyle", "postgres"),
                           ("standard_conforming_strings", "on"), ("TimeZone", "UTC"), ("is_superuser", "on"),
                           ("session_authorization", params.get("user", "")),
                           ("application_name", params.get("application_name", "")),
                           ("default_transaction_read_only", "off"),
                           ("in_hot_standby", "on" if self.is_standby else "off")):
            out += self._msg(b"S", key.encode() + b"\0" + value.encode() + b"\0")
        out += self._msg(b"K", struct.pack("!II", 4000 + number, 77))
        conn.sendall(out + self._ready(state))
        while True:
            kind = self._read(conn, 1)
            (length,) = struct.unpack("!I", self._read(conn, 4))
            body = self._read(conn, length - 4)
            if kind == b"X":
                return
            if kind != b"Q":
                conn.sendall(self._error("0A000", "the fake speaks the simple protocol only") + self._ready(state))
                continue
            conn.sendall(self._query(state, number, body.rstrip(b"\0").decode()) + self._ready(state))

    def _ready(self, state):
        if not state["polar"]:
            return self._msg(b"Z", state["tx"].encode())
        marker = b"w" if state["wal_pending"] else b"x"
        xids = "%d,%d" % (state["cid"], state["xid"]) if state["xid"] is not None and state["tx"] != "I" else ""
        return self._msg(b"Z", state["tx"].encode() + marker + xids.encode() + b"\0")

    def _error(self, code, text):
        return self._msg(b"E", b"SERROR\0VERROR\0C" + code.encode() + b"\0M" + text.encode() + b"\0\0")

    @staticmethod
    def _statements(text):
        out, cur, quoted = [], "", False
        for ch in text:
            if ch == "'":
                quoted = not quoted
            if ch == ";" and not quoted:
                out.append(cur)
                cur = ""
            else:
                cur += ch
        out.append(cur)
        return [s.strip() for s in out if s.strip()]

    def _rows(self, columns, names=None):
        desc = struct.pack("!H", len(columns))
        for i in range(len(columns)):
            name = names[i] if names else "c%d" % i
            desc += name.encode() + b"\0" + struct.pack("!IHIhih", 0, 0, 25, -1, -1, 0)
        row = struct.pack("!H", len(columns))
        for value in columns:
            row += struct.pack("!I", len(value.encode())) + value.encode()
        return self._msg(b"T", desc) + self._msg(b"D", row) + self._msg(b"C", b"SELECT 1\0")

    def _select(self, state, text):
        lower = text.lower()
        if "pg_control_checkpoint" in lower:  # tern's monitor round
            return self._rows(["t" if self.is_standby else "f", self.lsn, "1", "off"])
        if "wal_flush_lsn" in lower or "wal_insert_lsn" in lower or "replay_lsn" in lower:
            return self._rows([self.lsn])
        items = [item.strip() for item in text[len("select"):].split(",")]
        values = []
        for item in items:
            if item.lower() == "pg_is_in_recovery()":
                values.append("t" if self.is_standby else "f")
            elif item.lower().startswith("current_setting('"):
                values.append(state["settings"].get(item[len("current_setting('"):-2].lower(), ""))
            else:
                values.append(item.strip("'"))
        return self._rows(values)

    def _query(self, state, number, text):
        out = b""
        for statement in self._statements(text):
            with self.lock:
                self.statements.append((number, statement))
            words = statement.split()
            verb = words[0].upper()
            if state["tx"] == "E" and verb not in ("ROLLBACK", "ABORT", "COMMIT", "END"):
                return out + self._error("25P02", "current transaction is aborted")
            if verb in ("BEGIN", "START"):
                state.update(tx="T", xid=None, cid=0, wal_pending=False)
                out += self._msg(b"C", b"BEGIN\0")
            elif verb in ("COMMIT", "END", "ROLLBACK", "ABORT"):
                tag = b"ROLLBACK\0" if verb in ("ROLLBACK", "ABORT") or state["tx"] == "E" else b"COMMIT\0"
                state.update(tx="I", xid=None, cid=0, wal_pending=False)
                out += self._msg(b"C", tag)
            elif verb == "SET":
                rest = statement[3:].strip()
                name, _, value = rest.partition("=") if "=" in rest else rest.partition(" to ")
                state["settings"][name.strip().lower()] = value.strip().strip("'")
                out += self._msg(b"C", b"SET\0")
            elif verb == "RESET":
                name = statement[5:].strip().lower()
                if name == "all":
                    state["settings"].clear()
                else:
                    state["settings"].pop(name, None)
                out += self._msg(b"C", b"RESET\0")
            elif verb == "SHOW":
                name = words[1].lower() if len(words) > 1 else ""
                out += self._rows(["read committed" if name == "transaction_isolation"
                                   else state["settings"].get(name, "")])
            elif verb in ("INSERT", "UPDATE", "DELETE"):
                if self.is_standby:
                    if state["tx"] == "T":
                        state["tx"] = "E"
                    return out + self._error("25006", "cannot execute %s in a read-only transaction" % verb)
                if state["tx"] == "T":
                    if state["xid"] is None:
                        state["xid"] = self.next_xid
                        self.next_xid += 1
                    state["cid"] += 1
                    state["wal_pending"] = state["wal_pending"] or "wal_pending" in statement.lower()
                out += self._msg(b"C", (b"INSERT 0 1\0" if verb == "INSERT" else verb.encode() + b" 1\0"))
            elif verb == "WAIT" and self.version >= "19":  # WAIT FOR LSN '...' WITH (..., NO_THROW)
                out += self._rows([self.wait_status], names=["status"])
            elif verb == "SELECT":
                out += self._select(state, statement)
            else:
                out += self._msg(b"C", verb.encode() + b"\0")
        if not out:
            out = self._msg(b"I")
        return out
