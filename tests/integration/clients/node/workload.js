#!/usr/bin/env node
// node-postgres workload for tern's client tests (tests/integration/run_clients.py).
//
// CLIENTS pg.Client connections run at once, each the same steps, checking every result: unnamed
// parameterized queries, named prepared statements (query config with `name:`, parsed once per
// connection and then only bound), a BEGIN/COMMIT transaction that must stay on one server
// connection, a ROLLBACK that must leave nothing behind, and typed results. A step that fails records
// its SQLSTATE and the client goes on with a fresh connection, so one run reports every step that
// breaks.
//
// The last line printed is `RESULT {json}`; exit status 0 only when every step of every client passed
// and the final table totals are exact.
//
// usage: node workload.js --port PORT [--host H] [--clients N] [--rows N] [--prefix NAME]
'use strict';

let pg;
try {
  pg = require('pg');
} catch (err) {
  console.error(`node-postgres is not installed (${err.message}): run_clients.py installs it with npm ci`);
  process.exit(3);
}

const STEPS = ['connect', 'unnamed', 'named', 'transaction', 'rollback', 'types', 'verify'];
const COUNTER_UPDATES = 5; // the transaction step adds this many to the client's counter
const DEADLINE_MS = 100000; // the runner's own timeout is longer: print what we have first

function parseArgs(argv) {
  const args = { host: '127.0.0.1', port: 0, clients: 40, rows: 10, prefix: 'node' };
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in args) || i + 1 >= argv.length) throw new Error(`unknown or incomplete option ${argv[i]}`);
    args[key] = typeof args[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!args.port) throw new Error('--port is required');
  return args;
}

function itemValue(client, seq) {
  return `c${client}\ts${seq}\n\\ \u00e9\u2603 ${'x'.repeat(seq % 37)}`;
}

class Failure extends Error {}

function check(condition, what) {
  if (!condition) throw new Failure(what);
}

function describe(err) {
  const first = String(err.message || err).split('\n')[0];
  if (err.code && /^[0-9A-Z]{5}$/.test(err.code)) return `${err.code} ${first}`;
  return `${err.constructor.name}: ${first}`;
}

class Worker {
  constructor(args, index, sql) {
    this.args = args;
    this.c = index;
    this.sql = sql;
    this.client = null;
  }

  async connect() {
    await this.close();
    const client = new pg.Client({
      host: this.args.host, port: this.args.port, user: 'postgres', database: 'postgres',
      application_name: `node-${this.c}`, connectionTimeoutMillis: 30000, query_timeout: 30000,
    });
    client.on('error', () => {}); // a dropped connection fails the running step; do not crash
    await client.connect();
    this.client = client;
  }

  async close() {
    const client = this.client;
    this.client = null;
    if (client) {
      try {
        await client.end();
      } catch (err) {
        // already gone
      }
    }
  }

  named(name, text, values) {
    // The same name for the same text in every client, as an application's statement cache does.
    return this.client.query({ name: `${this.args.prefix}_${name}`, text, values });
  }

  async connectStep() {
    await this.connect();
    const r = await this.client.query('select 1 as one');
    check(r.rows.length === 1 && r.rows[0].one === 1, 'select 1');
    await this.client.query(this.sql.insertCounter, [this.c]);
  }

  async unnamedStep() {
    const rows = this.args.rows;
    for (let seq = 0; seq < rows; seq++) {
      const r = await this.client.query(this.sql.insertItem, [this.c, seq, itemValue(this.c, seq)]);
      check(r.rowCount === 1, 'insert rowCount');
    }
    for (let seq = rows - 1; seq >= 0; seq--) {
      const r = await this.client.query(this.sql.selectItem, [this.c, seq]);
      check(r.rows.length === 1 && r.rows[0].val === itemValue(this.c, seq), `unnamed select of seq ${seq}`);
    }
  }

  async namedStep() {
    const rows = this.args.rows;
    for (let seq = rows; seq < 2 * rows; seq++) {
      const r = await this.named('ins_item', this.sql.insertItem, [this.c, seq, itemValue(this.c, seq)]);
      check(r.rowCount === 1, 'named insert rowCount');
    }
    for (let seq = 2 * rows - 1; seq >= rows; seq--) {
      const r = await this.named('sel_item', this.sql.selectItem, [this.c, seq]);
      check(r.rows.length === 1 && r.rows[0].val === itemValue(this.c, seq),
        `named select of seq ${seq} returned ${JSON.stringify(r.rows)}`);
    }
    const r = await this.named('count_items', this.sql.countItems, [this.c]);
    check(r.rows[0].n === 2 * rows, `named count ${JSON.stringify(r.rows)}`);
  }

  async transactionStep() {
    await this.client.query('BEGIN');
    try {
      const pid = (await this.client.query('select pg_backend_pid() as pid')).rows[0].pid;
      const start = (await this.named('sel_counter', this.sql.selectCounter, [this.c])).rows[0].n;
      check(start === 0, `counter starts at ${start}`);
      for (let k = 1; k <= COUNTER_UPDATES; k++) {
        const r = await this.named('bump_counter', this.sql.bumpCounter, [1, this.c]);
        check(r.rows[0].n === k, `counter after ${k} updates is ${r.rows[0].n}`);
      }
      const again = (await this.client.query('select pg_backend_pid() as pid')).rows[0].pid;
      check(again === pid, 'the transaction stayed on one server connection');
      // By its text: a pooler may prepare it on the server under a name of its own.
      const prepared = await this.client.query(
        'select count(*)::int as n from pg_prepared_statements where not from_sql and statement = $1',
        [this.sql.bumpCounter]);
      check(prepared.rows[0].n >= 1, 'node-postgres prepared bump_counter on this server connection');
      await this.client.query('COMMIT');
    } catch (err) {
      await this.client.query('ROLLBACK').catch(() => {});
      throw err;
    }
    const r = await this.named('sel_counter', this.sql.selectCounter, [this.c]);
    check(r.rows[0].n === COUNTER_UPDATES, `committed counter is ${r.rows[0].n}`);
  }

  async rollbackStep() {
    await this.client.query('BEGIN');
    await this.named('ins_item', this.sql.insertItem, [this.c, 1000000, 'rolled back']);
    const r = await this.named('bump_counter', this.sql.bumpCounter, [100, this.c]);
    check(r.rows[0].n === COUNTER_UPDATES + 100, 'counter inside the transaction');
    await this.client.query('ROLLBACK');
    const gone = await this.client.query(
      `select count(*)::int as n from ${this.sql.items} where client = $1 and seq = 1000000`, [this.c]);
    check(gone.rows[0].n === 0, 'the rolled-back insert is gone');
    const counter = await this.named('sel_counter', this.sql.selectCounter, [this.c]);
    check(counter.rows[0].n === COUNTER_UPDATES, 'the rolled-back update is gone');
  }

  async typesStep() {
    const text = "select $1::int as c, $2::numeric * 2 as num, $3::jsonb as j, $4::bytea as b, " +
      "$5::timestamptz as t, array[$1::int, $1::int + 1] as a, null::text as z";
    const bytes = Buffer.from([0, 1, 2, 255, this.c & 255]);
    const when = new Date(Date.UTC(2024, 1, 29, 12, 0, this.c));
    for (let k = 0; k < 3; k++) {
      const r = await this.named('types', text, [this.c, `${this.c}.25`, { client: this.c, k }, bytes, when]);
      const row = r.rows[0];
      check(row.c === this.c && row.num === `${this.c * 2}.50` && row.j.client === this.c && row.j.k === k &&
        Buffer.compare(row.b, bytes) === 0 && row.t.getTime() === when.getTime() &&
        row.a.length === 2 && row.a[1] === this.c + 1 && row.z === null, `typed row ${JSON.stringify(row)}`);
    }
  }

  async verifyStep() {
    const rows = this.args.rows;
    const r = await this.client.query(
      `select count(*)::int as n, coalesce(sum(length(val)), 0)::int as len from ${this.sql.items} where client = $1`,
      [this.c]);
    let len = 0;
    for (let seq = 0; seq < 2 * rows; seq++) len += itemValue(this.c, seq).length;
    check(r.rows[0].n === 2 * rows && r.rows[0].len === len,
      `items of client ${this.c}: ${JSON.stringify(r.rows[0])}, want n ${2 * rows} len ${len}`);
  }
}

async function runWorker(args, index, sql, report) {
  const w = new Worker(args, index, sql);
  try {
    for (const step of STEPS) {
      let outcome = null;
      try {
        if (!w.client && step !== 'connect') await w.connect();
        await w[`${step}Step`]();
      } catch (err) {
        outcome = describe(err);
        await w.close();
      }
      const entry = report.steps[step];
      if (outcome === null) {
        entry.ok += 1;
      } else {
        entry.failed += 1;
        if (entry.errors.length < 5 && !entry.errors.includes(outcome)) entry.errors.push(outcome);
      }
    }
  } finally {
    await w.close();
  }
}

async function main() {
  const args = parseArgs(process.argv);
  const p = args.prefix;
  const sql = {
    items: `${p}_items`,
    insertItem: `insert into ${p}_items (client, seq, val) values ($1, $2, $3)`,
    selectItem: `select val from ${p}_items where client = $1 and seq = $2`,
    countItems: `select count(*)::int as n from ${p}_items where client = $1`,
    insertCounter: `insert into ${p}_counters (client, n) values ($1, 0)`,
    selectCounter: `select n from ${p}_counters where client = $1`,
    bumpCounter: `update ${p}_counters set n = n + $1 where client = $2 returning n`,
  };
  const report = { stack: 'node-postgres', clients: args.clients, steps: {} };
  for (const s of STEPS) report.steps[s] = { ok: 0, failed: 0, errors: [] };
  const watchdog = setTimeout(() => {
    report.ok = false;
    report.totals_error = `the workload did not finish within ${DEADLINE_MS} ms`;
    console.log('RESULT ' + JSON.stringify(report));
    process.exit(2);
  }, DEADLINE_MS);
  const started = Date.now();
  const connection = () => new pg.Client({ host: args.host, port: args.port, user: 'postgres', database: 'postgres',
    connectionTimeoutMillis: 30000, query_timeout: 30000 });

  const setup = connection();
  await setup.connect();
  await setup.query(`drop table if exists ${p}_items, ${p}_counters`);
  await setup.query(`create table ${p}_items (client int, seq int, val text not null, primary key (client, seq))`);
  await setup.query(`create table ${p}_counters (client int primary key, n int not null)`);
  await setup.end();

  const workers = [];
  for (let i = 0; i < args.clients; i++) workers.push(runWorker(args, i, sql, report));
  await Promise.all(workers);

  const check_ = connection();
  await check_.connect();
  const t = (await check_.query(`select (select count(*)::int from ${p}_items) as items, ` +
    `(select coalesce(sum(n), 0)::int from ${p}_counters) as counter_sum`)).rows[0];
  await check_.end();
  report.totals = t;
  const want = { items: args.clients * 2 * args.rows, counter_sum: args.clients * COUNTER_UPDATES };
  if (t.items !== want.items || t.counter_sum !== want.counter_sum) {
    report.totals_error = `totals ${JSON.stringify(t)}, want ${JSON.stringify(want)}`;
  }
  report.elapsed_s = (Date.now() - started) / 1000;
  report.ok = !report.totals_error &&
    Object.values(report.steps).every((s) => s.failed === 0 && s.ok === args.clients);
  for (const [name, s] of Object.entries(report.steps)) {
    const counts = `ok ${String(s.ok).padStart(3)} failed ${String(s.failed).padStart(3)}`;
    console.log(`${name.padEnd(18)} ${counts} ${s.errors.join('; ')}`);
  }
  console.log('RESULT ' + JSON.stringify(report));
  clearTimeout(watchdog);
  return report.ok ? 0 : 1;
}

main().then((code) => process.exit(code), (err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(2);
});
