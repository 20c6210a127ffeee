#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_session (tests/fuzz/corpus/session/), each file named by the SHA-1 of
its content as the other corpora are. The encoding is fuzz_session.c's (see its opening comment): a
configuration byte, then steps.

    tests/fuzz/gen_session_corpus.py [OUT_DIR]
"""
import hashlib
import os
import sys

# Configuration bits (byte 0).
SESSION, TRANSACTION = 0, 1
TR_NONE, TR_SESSION, TR_SELECT, TR_TRANSACTION = 0 << 1, 1 << 1, 2 << 1, 3 << 1
STMTS = 1 << 3
DIGESTS = 1 << 4
TR_OFF = 1 << 5
SMALL_POOL = 1 << 6
INPUT_LOGIN = 1 << 7

# Step kinds.
(CLIENT_RAW, CLIENT_MSG, CLIENT_CANNED, CLIENT_QUERY, CLIENT_EXT, SERVER_RAW, SERVER_MSG, SERVER_CANNED,
 SERVER_AUTO, SERVER_FAIL, DELIVER, SERVER_CLOSE, CLIENT_CLOSE, TICK, POOL, CLIENT_DIRECT) = range(16)
HOLD = 0x10
SLOT1 = 0x20

# Extended-protocol sub-messages (CLIENT_EXT).
PARSE, BIND, DESCRIBE_S, DESCRIBE_P, EXECUTE, CLOSE_S, CLOSE_P, SYNC = range(8)
STMT = {"": 0, "s1": 1, "s2": 2, "s3": 3}
# Indexes in fuzz_session_server.c's fuzz_client_canned table.
CANNED_FLUSH, CANNED_FUNCTION_CALL = 69, 71


def op(kind, variant=0, hold=False, slot=0):
    return bytes([kind | (HOLD if hold else 0) | (SLOT1 if slot else 0) | (variant << 6)])


def length(n):
    return bytes([n]) if n < 255 else bytes([255, n >> 8, n & 255])


def query(text, slot=0, hold=False, variant=0):
    t = text.encode()
    return op(CLIENT_QUERY, variant, hold, slot) + length(len(t)) + t


def ext(sub, stmt="", portal="", one=False, text=None, slot=0, hold=True):
    b = sub | (STMT[stmt] << 3) | (0x20 if portal == "p1" else 0) | (0x40 if one else 0)
    out = op(CLIENT_EXT, 0, hold, slot) + bytes([b])
    if sub == PARSE:
        t = text.encode()
        out += length(len(t)) + t
    return out


def client_msg(type_, body, slot=0, hold=False, variant=0):
    return op(CLIENT_MSG, variant, hold, slot) + type_.encode() + length(len(body)) + body


def server_msg(type_, body, slot=0, hold=False, variant=0):
    return op(SERVER_MSG, variant, hold, slot) + type_.encode() + length(len(body)) + body


def raw_client(data, slot=0, hold=False):
    return op(CLIENT_RAW, 0, hold, slot) + length(len(data)) + data


def raw_server(data, slot=0, hold=False):
    return op(SERVER_RAW, 0, hold, slot) + length(len(data)) + data


def direct(data, slot=0):
    return op(CLIENT_DIRECT, 0, False, slot) + length(len(data)) + data


def auto(limit=0, slot=0, hold=False):
    return op(SERVER_AUTO, limit, hold, slot)


def fail(statement=1, error=0, limit=0, slot=0):
    return op(SERVER_FAIL, limit, False, slot) + bytes([((statement - 1) << 3) | error])


def deliver(variant=0, n=0, slot=0):
    return op(DELIVER, variant, False, slot) + bytes([n])


def flush():
    return op(CLIENT_EXT, 0, False) + bytes([SYNC])


def framed(type_, body):
    return type_.encode() + (len(body) + 4).to_bytes(4, "big") + body


def startup(user="fuzz", database="app"):
    params = b"user\0" + user.encode() + b"\0database\0" + database.encode() + b"\0\0"
    return (len(params) + 8).to_bytes(4, "big") + (196608).to_bytes(4, "big") + params


SELECT = "SELECT 1"
seeds = {}


def seed(name, config, *steps):
    seeds[name] = bytes([config]) + b"".join(steps)


def extended_batch(slot=0):
    return (ext(PARSE, "", text="SELECT $1", slot=slot) + ext(BIND, "", one=True, slot=slot) +
            ext(DESCRIBE_P, slot=slot) + ext(EXECUTE, slot=slot) + ext(SYNC, slot=slot, hold=False))


def named_batch(slot=0):
    return (ext(PARSE, "s1", text="SELECT 1", slot=slot) + ext(DESCRIBE_S, "s1", slot=slot) +
            ext(BIND, "s1", portal="p1", slot=slot) + ext(EXECUTE, portal="p1", slot=slot) +
            ext(CLOSE_P, portal="p1", slot=slot) + ext(SYNC, slot=slot, hold=False))


for config_name, config in [("session", SESSION | TR_OFF),
                            ("transaction", TRANSACTION | STMTS | DIGESTS),
                            ("tr_session", TRANSACTION | TR_SESSION | STMTS),
                            ("tr_transaction", TRANSACTION | TR_TRANSACTION | STMTS | DIGESTS),
                            ("tr_select_small", TRANSACTION | TR_SELECT | SMALL_POOL)]:
    seed(config_name + "_simple", config, query(SELECT), auto())
    seed(config_name + "_extended", config, extended_batch(), auto())
    seed(config_name + "_named", config, named_batch(), auto(), named_batch(), auto())
    seed(config_name + "_tx", config, query("BEGIN"), auto(), query("INSERT INTO t VALUES (1)"), auto(),
         query("COMMIT"), auto())
    seed(config_name + "_copy_in", config, query("COPY t FROM STDIN"), auto(),
         client_msg("d", b"1\n", hold=True), client_msg("d", b"2\n", hold=True), client_msg("c", b""), auto())
    seed(config_name + "_copy_out", config, query("COPY t TO STDOUT"), auto())
    seed(config_name + "_lost_mid_answer", config, query(SELECT), auto(hold=True), deliver(0, 12),
         op(SERVER_CLOSE), query(SELECT), auto())
    seed(config_name + "_lost_in_tx", config, query("BEGIN"), auto(), query("SELECT 1"), auto(),
         query("UPDATE t SET a = 2"), op(SERVER_CLOSE), auto(), query("COMMIT"), auto())
    seed(config_name + "_lost_idle", config, query("SET search_path TO app"), auto(), op(SERVER_CLOSE),
         query(SELECT), auto())
    seed(config_name + "_fatal", config, query(SELECT), op(SERVER_CLOSE, 3), query(SELECT), auto())
    seed(config_name + "_error_batch", config, extended_batch(), fail(1, 0), query("SELECT error"), auto())
    seed(config_name + "_two_clients", config, query("BEGIN"), auto(), query(SELECT, slot=1), auto(slot=1),
         query("COMMIT"), auto(), auto(slot=1))

# Beyond the common paths: pieces the fuzzer would take long to find.
T = TRANSACTION | TR_TRANSACTION | STMTS
seed("listen_pin", T, query("LISTEN ch"), auto(), server_msg("A", b"\0\0\0\1ch\0hi\0"), query("UNLISTEN *"),
     auto())
seed("sql_prepare_pin", T, query("PREPARE q AS SELECT 1"), auto(), query("EXECUTE q"), auto(),
     query("DEALLOCATE ALL"), auto())
seed("tern_settings", T, query("SET tern.consistency = eventual"), query("SHOW tern.consistency"),
     query("SET tern.transaction_split = on"), query(SELECT), auto())
seed("replay_tx", T, query("BEGIN"), auto(), query("SELECT 1"), auto(), op(SERVER_CLOSE), query("SELECT 1"),
     auto(), auto(), query("COMMIT"), auto())
seed("replay_tx_mid_statement", T, query("BEGIN"), auto(), query("SELECT 1"), auto(), query("SELECT 1"),
     op(SERVER_CLOSE), auto(), auto(), query("COMMIT"), auto())
seed("refused_open", T | SMALL_POOL, op(POOL, 0), query(SELECT), op(POOL, 2) + bytes([0]), op(POOL, 0),
     query(SELECT), auto())
seed("parked_then_timeout", T | SMALL_POOL, query("BEGIN"), auto(), query(SELECT, slot=1), op(TICK) + bytes([30]),
     query("COMMIT"), auto())
seed("idle_tx_timeout", T, query("BEGIN"), auto(), op(TICK) + bytes([120]))
seed("backend_timeout", TRANSACTION | TR_TRANSACTION, query("BEGIN"), auto(), query(SELECT),
     op(TICK) + bytes([10]), auto(), query("COMMIT"), auto())
seed("query_timeout", TRANSACTION | SMALL_POOL, query(SELECT), op(TICK) + bytes([10]))
seed("client_back_pressure", T, op(CLIENT_CLOSE, 3), query("COPY t TO STDOUT"),
     server_msg("D", b"\0\1\0\0\0\1" + b"x", variant=2), server_msg("D", b"\0\1", variant=2),
     server_msg("D", b"\0\1", variant=2), server_msg("D", b"\0\1", variant=2), server_msg("C", b"SELECT 4\0"),
     server_msg("Z", b"I"), op(CLIENT_CLOSE, 3))
seed("long_query", T, query("SELECT 1", variant=2), auto(), query("SELECT 2", variant=1), auto())
seed("torn_client_message", T, query("SELECT 1", hold=True), deliver(1, 7), op(SERVER_CLOSE), deliver(1, 0),
     auto())
seed("terminate", T, query(SELECT), auto(), op(CLIENT_CLOSE, 2))
seed("direct_bytes", T, direct(framed("Q", b"SELECT 1\0") + framed("Q", b"BEGIN\0")), auto(), auto(),
     direct(framed("Q", b"COMMIT\0")), auto())
seed("input_login", TRANSACTION | INPUT_LOGIN, raw_client(startup()), query(SELECT), auto())
seed("session_reset", SESSION, query("SET TimeZone = 'UTC'"), auto(), op(CLIENT_CLOSE, 0), auto())
seed("flush_batch", T, ext(PARSE, "s2", text="INSERT INTO t VALUES ($1)"), ext(BIND, "s2", one=True),
     ext(EXECUTE), op(CLIENT_CANNED) + bytes([CANNED_FLUSH]), auto(), ext(SYNC, hold=False), auto())
seed("copy_extended", T, ext(PARSE, "s3", text="COPY t FROM STDIN"), ext(BIND, "s3"), ext(EXECUTE),
     ext(SYNC, hold=False), auto(), client_msg("d", b"1\n"), client_msg("c", b""), auto())
seed("copy_fail_lost", T, query("COPY t FROM STDIN"), auto(), client_msg("d", b"1\n"), op(SERVER_CLOSE),
     client_msg("f", b"bad\0"), auto())
seed("server_garbage", T, query(SELECT), raw_server(b"Z\0\0\0\x02"), query(SELECT), auto())
seed("big_server_error", T, query(SELECT), server_msg("E", b"SERROR\0C42601\0M", variant=2), auto())
seed("savepoints", T, query("BEGIN"), auto(), query("SAVEPOINT a"), auto(), query("SELECT error"), auto(),
     query("ROLLBACK TO SAVEPOINT a"), auto(), query("COMMIT"), auto())
seed("replica_tx_no_monitor", T, query("BEGIN READ ONLY"), auto(), query(SELECT), auto(), query("COMMIT"),
     auto())
seed("multi_statement", T, query("BEGIN; INSERT INTO t VALUES (1); COMMIT"), auto(), op(SERVER_CLOSE),
     query(SELECT), auto())
seed("function_call", T, op(CLIENT_CANNED) + bytes([CANNED_FUNCTION_CALL]), auto())
seed("second_client_reuses", T, query("SET application_name = 'x'"), auto(), op(CLIENT_CLOSE), query(SELECT),
     auto(), query(SELECT, slot=1), auto(slot=1))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                 "corpus", "session")
    os.makedirs(out_dir, exist_ok=True)
    for name, data in sorted(seeds.items()):
        digest = hashlib.sha1(data).hexdigest()
        with open(os.path.join(out_dir, digest), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {out_dir}")


if __name__ == "__main__":
    main()
