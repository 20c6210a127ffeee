/*
 * test_layout.c — keeps the module dependency arrows of DESIGN §1 true by reading every #include
 * line of the source tree (STYLE: "a test under tests/ that greps #include lines keeps these edges
 * true"):
 *   - only ring/ includes <liburing.h>;
 *   - ring/ includes nothing of pool/, replay/ or core/ except base/;
 *   - pool/ includes nothing of core/ except base/, and nothing of replay/;
 *   - replay/'s library (the decisions and the journal's storage) includes nothing of core/ (except
 *     base/), pool/, ring/ or replay's wing;
 *   - base/ includes nothing from other tern folders;
 *   - the wings: auth/ includes base/ and pool/, nothing of core/; core/ includes base/, ring/, pool/
 *     and auth/, nothing of routing/, replay/, admin/ or main/ (it reaches routing and Transaction
 *     Replay through session_parts, which main/parts.c composes); routing/ includes base/, pool/, auth/
 *     and core/, nothing of ring/, replay/ or admin/; replay's wing (the replay/ files that have a place
 *     in core_order: the journal's owner and re-run, a session's recovery, its record, the journal's
 *     capture) includes base/, pool/, auth/, core/, routing/ and replay's library, nothing of ring/ or
 *     admin/; admin/ may include all but main/, the top;
 *   - a module includes another module's root headers only (pool/pool.h, never pool/x/y.h);
 *   - no units of tern's modules include each other in a circle (a unit: db.c and db.h are pool/db);
 *   - core's own files, routing's and replay's wing's keep one declared order (core_order below, lowest
 *     first: core's, then routing's, then replay's wing's): a file includes their headers of its own
 *     unit or of units below it, never above, so none has include cycles. A unit is a file name without
 *     its extension (session.h and session.c are one unit); a core, routing or replay wing file whose
 *     unit is not in the order is reported, so a new file takes its place in the order on purpose;
 *   - route_internal.h, what routing's files share, is included by routing/route*.c alone; ring_internal.h,
 *     what the ring's two backends share, by ring/ alone; each concern's state is written by its own
 *     files alone (layout_state_owners: routing's s->routing, leg->route and s->steer by routing/route*,
 *     s->replay by replay/, s->journal, s->params, s->pins, s->stmts, s->digest, s->shadow by their observers);
 * An include is resolved the way a compiler with every include directory would (the including file's
 * folder, then '.', 'core', 'base', 'auth', 'admin', 'pool' and 'ring'; no library has routing/ among them), so `#include "proto.h"` from pool/ counts as core/, even
 * though meson gives pool/ only base and the compiler refuses it too.
 * The checker is also run on a small tree written here with known violations, so it can fail.
 */
#include "base/base.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef TERN_SOURCE_ROOT
#error "TERN_SOURCE_ROOT must name the source tree (set by tests/meson.build)"
#endif

#define LAYOUT_PATH_MAX 4096u
#define LAYOUT_REPORT_MAX (64u * 1024u)
/* Folder depth walked; the tree is shallow, this only stops a symlink loop. */
#define LAYOUT_DEPTH_MAX 16

enum module { MODULE_OTHER = 0, MODULE_BASE, MODULE_CORE, MODULE_POOL, MODULE_REPLAY, MODULE_RING, MODULE_AUTH, MODULE_ROUTING, MODULE_REPLAY_WING, MODULE_ADMIN, MODULE_MAIN };

static const char *const module_names[] = {"other", "base", "core", "pool", "replay", "ring", "auth", "routing", "replay wing", "admin", "main"};

/* core's units, then routing's (routing/), then replay's wing's (replay/), lowest first: the codec and
 * libraries, the process's shared state, what a worker lends its sessions, the session and its parts,
 * the login, the relay and the worker; routing's state, the monitor, Patroni, reads on replicas and
 * split transactions; the journal (its owner and its operator re-run), Transaction Replay's state, a
 * session's recovery, its record and the journal's capture. main/ (the table that joins them) is above. */
static const char *const core_order[] = {
	/* core */
	"proto", "sendq", "reasons", "sql", "classify", "digest", "params", "stmts", "databases", "config", "import", "listen",
	"gates", "runtime", "shadow", "pins", "host", "leg",
	"session", "session_events", "session_tls", "observer", "observer_copy", "observer_stmts_replies", "observer_stmts", "observer_params", "observer_pins",
	"observer_stats", "observer_digest", "observer_shadow", "dispatch", "session_login", "session_relay",
	"worker_stats", "worker",
	/* routing */
	"split", "route_types", "patroni", "monitor_conn", "monitor", "route_internal", "route_setting", "route", "route_batch",
	"route_guard", "route_observer", "route_relay", "polar",
	/* replay's wing */
	"journal", "journal_rerun", "replay_types", "recover", "recover_wait", "observer_sets", "observer_replay", "observer_journal",
};

/* core/, routing/ and replay's wing share core_order. */
static bool is_ordered(enum module m) { return m == MODULE_CORE || m == MODULE_ROUTING || m == MODULE_REPLAY_WING; }

/* The rank of a core, routing or replay wing file's unit in core_order, or -1. `rel` is relative to the
 * root. */
static int core_rank(const char *rel)
{
	const char *name = strrchr(rel, '/');
	name = name ? name + 1 : rel;
	size_t n = strcspn(name, ".");
	for (size_t i = 0; i < TERN_ARRAY_LEN(core_order); i++)
		if (strlen(core_order[i]) == n && strncmp(core_order[i], name, n) == 0)
			return (int)i;
	return -1;
}

/* The tree's units (a path without its extension: pool/db is db.c and db.h) and the include arrows
 * between them, for the cycle check. */
#define LAYOUT_UNITS_MAX 512u
#define LAYOUT_UNIT_LEN 96u
#define LAYOUT_ARROWS_MAX 4096u

struct layout {
	char units[LAYOUT_UNITS_MAX][LAYOUT_UNIT_LEN];
	uint32_t unit_count;
	struct layout_arrow {
		uint16_t from, to;
	} arrows[LAYOUT_ARROWS_MAX];
	uint32_t arrow_count;
	const char *root;
	char root_resolved[PATH_MAX];
	size_t root_resolved_len;
	uint32_t c_files;
	uint32_t h_files;
	uint32_t includes;
	uint32_t violations;
	char report[LAYOUT_REPORT_MAX];
	size_t report_len;
};

static void layout_report(struct layout *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void layout_report(struct layout *l, const char *fmt, ...)
{
	l->violations++;
	if (l->report_len + 1 >= sizeof(l->report))
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(l->report + l->report_len, sizeof(l->report) - l->report_len, fmt, ap);
	va_end(ap);
	if (n > 0)
		l->report_len = TERN_MIN(l->report_len + (size_t)n, sizeof(l->report) - 1);
}

static bool has_prefix(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* Module of a path relative to the root. */
static enum module module_of(const char *rel)
{
	if (has_prefix(rel, "base/"))
		return MODULE_BASE;
	if (has_prefix(rel, "main/"))
		return MODULE_MAIN;
	if (has_prefix(rel, "core/"))
		return MODULE_CORE;
	if (has_prefix(rel, "pool/"))
		return MODULE_POOL;
	if (has_prefix(rel, "replay/")) /* its wing: the files with a place in the declared order */
		return core_rank(rel) >= 0 ? MODULE_REPLAY_WING : MODULE_REPLAY;
	if (has_prefix(rel, "ring/"))
		return MODULE_RING;
	if (has_prefix(rel, "auth/"))
		return MODULE_AUTH;
	if (has_prefix(rel, "routing/"))
		return MODULE_ROUTING;
	if (has_prefix(rel, "admin/"))
		return MODULE_ADMIN;
	return MODULE_OTHER;
}

/* out = a "/" b, or just b when a is empty; a path that does not fit fails the test. */
static void path_join(char *out, size_t size, const char *a, const char *b)
{
	int n = snprintf(out, size, "%s%s%s", a, a[0] ? "/" : "", b);
	cr_assert(n > 0 && (size_t)n < size, "path too long: %s/%s", a, b);
}

static bool is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The tern module an include lands in, resolved like a compiler with -I. -Icore -Ibase -Iauth -Iadmin
 * -Ipool -Iring;
 * MODULE_OTHER for system and library headers. `dir_rel` is the including file's folder, relative to
 * the root; `to_rel` gets the included file's path relative to the root ("" for MODULE_OTHER). */
static enum module layout_resolve(const struct layout *l, const char *dir_rel, const char *name, bool is_quoted,
				  char *to_rel, size_t to_rel_size)
{
	char candidate[LAYOUT_PATH_MAX];
	const char *bases[8];
	size_t base_count = 0;
	to_rel[0] = '\0';
	if (is_quoted)
		bases[base_count++] = dir_rel;
	bases[base_count++] = "";
	bases[base_count++] = "core";
	bases[base_count++] = "base";
	bases[base_count++] = "auth";
	bases[base_count++] = "admin";
	bases[base_count++] = "pool";
	bases[base_count++] = "ring";
	for (size_t i = 0; i < base_count; i++) {
		char base_path[LAYOUT_PATH_MAX];
		path_join(base_path, sizeof(base_path), l->root, bases[i]);
		path_join(candidate, sizeof(candidate), base_path, name);
		if (!is_file(candidate))
			continue;
		char resolved[PATH_MAX];
		cr_assert_not_null(realpath(candidate, resolved), "realpath %s: %s", candidate, strerror(errno));
		size_t root_len = l->root_resolved_len;
		if (strncmp(resolved, l->root_resolved, root_len) != 0 || resolved[root_len] != '/')
			return MODULE_OTHER; /* "../" out of the tree */
		base_strlcpy(to_rel, resolved + root_len + 1, to_rel_size);
		return module_of(to_rel);
	}
	return MODULE_OTHER;
}

/* Whether module `from` may include a header of module `to`. The wings: auth lies below core, routing
 * above it, replay's wing above routing (core_order orders their files), admin above them; main is the
 * top. core reaches routing and replay's wing through session_parts alone (main/parts.c). */
static bool layout_edge_is_allowed(enum module from, enum module to)
{
	if (to == MODULE_OTHER || to == from)
		return true;
	switch (from) {
	case MODULE_BASE:
		return false; /* the leaf includes only itself */
	case MODULE_RING:
		return to == MODULE_BASE;
	case MODULE_POOL:
		return to == MODULE_BASE || to == MODULE_RING;
	case MODULE_REPLAY:
		return to == MODULE_BASE;
	case MODULE_AUTH:
		return to == MODULE_BASE || to == MODULE_POOL;
	case MODULE_ROUTING:
		return to == MODULE_BASE || to == MODULE_POOL || to == MODULE_AUTH || to == MODULE_CORE;
	case MODULE_REPLAY_WING:
		return to == MODULE_BASE || to == MODULE_POOL || to == MODULE_AUTH || to == MODULE_CORE ||
		       to == MODULE_ROUTING || to == MODULE_REPLAY;
	case MODULE_CORE:
		return to == MODULE_BASE || to == MODULE_RING || to == MODULE_POOL || to == MODULE_AUTH;
	case MODULE_ADMIN:
		return to != MODULE_MAIN;
	default:
		return true;
	}
}

/* Parses `#include "x"` or `#include <x>` (spaces allowed around '#'); false for other lines. */
static bool parse_include(const char *line, char *name, size_t name_size, bool *is_quoted)
{
	const char *p = line;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p++ != '#')
		return false;
	while (*p == ' ' || *p == '\t')
		p++;
	if (strncmp(p, "include", 7) != 0)
		return false;
	p += 7;
	while (*p == ' ' || *p == '\t')
		p++;
	char close;
	if (*p == '"')
		close = '"';
	else if (*p == '<')
		close = '>';
	else
		return false; /* a macro include; none in tern */
	*is_quoted = (close == '"');
	p++;
	const char *end = strchr(p, close);
	if (!end || (size_t)(end - p) >= name_size)
		return false;
	memcpy(name, p, (size_t)(end - p));
	name[end - p] = '\0';
	return true;
}

/* A write of routing's state on this line, (s->routing->x = ..., leg->route->y++, ...): true. Reads, and
 * what is passed by address, are not writes here. */
/* The unit of a path relative to the root (its index in l->units, added when new). */
static uint16_t layout_unit(struct layout *l, const char *rel)
{
	char unit[LAYOUT_UNIT_LEN];
	cr_assert(base_strlcpy(unit, rel, sizeof(unit)), "path too long for a unit: %s", rel);
	char *dot = strrchr(unit, '.');
	if (dot && !strchr(dot, '/'))
		*dot = '\0';
	for (uint32_t i = 0; i < l->unit_count; i++)
		if (strcmp(l->units[i], unit) == 0)
			return (uint16_t)i;
	cr_assert_lt(l->unit_count, LAYOUT_UNITS_MAX, "more than %u units", LAYOUT_UNITS_MAX);
	memcpy(l->units[l->unit_count], unit, sizeof(unit));
	return (uint16_t)l->unit_count++;
}

/* An include arrow between two units of tern's own modules (tests and bench are not units). */
static void layout_arrow(struct layout *l, const char *from_rel, const char *to_rel)
{
	uint16_t from = layout_unit(l, from_rel), to = layout_unit(l, to_rel);
	if (from == to)
		return;
	for (uint32_t i = 0; i < l->arrow_count; i++)
		if (l->arrows[i].from == from && l->arrows[i].to == to)
			return;
	cr_assert_lt(l->arrow_count, LAYOUT_ARROWS_MAX, "more than %u include arrows", LAYOUT_ARROWS_MAX);
	l->arrows[l->arrow_count++] = (struct layout_arrow){from, to};
}

/* Depth-first from unit u: an arrow back to a unit on the path (state 1) is a cycle, reported with the
 * path that closes it. state: 0 unseen, 1 on the path, 2 done. */
static void layout_cycles_from(struct layout *l, uint16_t u, uint8_t *state, uint16_t *path, uint32_t depth)
{
	state[u] = 1;
	path[depth] = u;
	for (uint32_t i = 0; i < l->arrow_count; i++) {
		if (l->arrows[i].from != u)
			continue;
		uint16_t v = l->arrows[i].to;
		if (state[v] == 0) {
			layout_cycles_from(l, v, state, path, depth + 1);
		} else if (state[v] == 1) {
			char cycle[1024] = "";
			uint32_t at = depth;
			while (path[at] != v)
				at--;
			for (uint32_t k = at; k <= depth; k++) {
				strncat(cycle, l->units[path[k]], sizeof(cycle) - strlen(cycle) - 1);
				strncat(cycle, " -> ", sizeof(cycle) - strlen(cycle) - 1);
			}
			strncat(cycle, l->units[v], sizeof(cycle) - strlen(cycle) - 1);
			layout_report(l, "include cycle: %s\n", cycle);
		}
	}
	state[u] = 2;
}

static void layout_check_cycles(struct layout *l)
{
	uint8_t state[LAYOUT_UNITS_MAX] = {0};
	uint16_t path[LAYOUT_UNITS_MAX];
	for (uint16_t u = 0; u < l->unit_count; u++)
		if (state[u] == 0)
			layout_cycles_from(l, u, state, path, 0);
}

/* A concern's per-session and per-leg state (the struct members named `fields`) and the files that may
 * write it (paths beginning with one of `owners`); every other file only reads it or calls its owner. */
static const struct layout_state_owner {
	const char *concern;
	const char *fields[3];
	const char *owners[3];
	const char *owners_text;
} layout_state_owners[] = {
	{"routing", {"routing->", "route->"}, {"routing/route", "routing/polar"}, "routing's files (routing/route*, polar.c)"},
	{"the steering", {"steer."}, {"routing/route"}, "routing's files (routing/route*)"},
	{"Transaction Replay", {"replay->"}, {"replay/"}, "replay/'s files"},
	{"the journal", {"journal->"}, {"replay/observer_journal", "replay/journal"}, "replay/observer_journal.c, journal*"},
	{"params", {"params."}, {"core/observer_params", "core/params"}, "core/observer_params.c, params.c"},
	{"pins", {"pins."}, {"core/observer_pins"}, "core/observer_pins.c"},
	{"stmts", {"stmts."}, {"core/observer_stmts", "core/stmts"}, "core/observer_stmts*.c, stmts.c"},
	{"digest", {"digest."}, {"core/observer_digest", "core/digest"}, "core/observer_digest.c, digest.c"},
	{"shadow", {"shadow."}, {"core/observer_shadow", "core/shadow"}, "core/observer_shadow.c, shadow.c"},
};

static bool layout_is_owner(const struct layout_state_owner *o, const char *rel)
{
	for (size_t i = 0; i < TERN_ARRAY_LEN(o->owners) && o->owners[i]; i++)
		if (has_prefix(rel, o->owners[i]))
			return true;
	return false;
}

/* The line assigns to (=, op=, ++, --) a member reached through one of `fields` (s->routing->x = ...). */
static bool layout_writes_state(const char *line, const char *const *fields, size_t field_count)
{
	for (size_t f = 0; f < field_count && fields[f]; f++) {
		for (const char *p = strstr(line, fields[f]); p; p = strstr(p + 1, fields[f])) {
			if (!((p >= line + 2 && p[-2] == '-' && p[-1] == '>') || (p > line && p[-1] == '.')))
				continue;
			const char *q = p + strlen(fields[f]);
			while (*q == '_' || *q == '.' || (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9'))
				q++;
			while (*q == ' ' || *q == '\t')
				q++;
			if ((q[0] == '=' && q[1] != '=') || (q[1] == '=' && strchr("|&+-", q[0])) ||
			    (q[0] == '+' && q[1] == '+') || (q[0] == '-' && q[1] == '-'))
				return true;
		}
	}
	return false;
}

static void layout_check_file(struct layout *l, const char *path, const char *rel)
{
	enum module from = module_of(rel);
	if (is_ordered(from) && core_rank(rel) < 0)
		layout_report(l, "%s: its unit is not in core's declared order (core_order in test_layout.c)\n", rel);
	char dir_rel[LAYOUT_PATH_MAX];
	base_strlcpy(dir_rel, rel, sizeof(dir_rel));
	char *slash = strrchr(dir_rel, '/');
	if (slash)
		*slash = '\0';
	else
		dir_rel[0] = '\0';
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
	char line[1024];
	unsigned line_no = 0;
	while (fgets(line, sizeof(line), f)) {
		line_no++;
		char name[512];
		bool is_quoted;
		/* A session's phase changes in session_set_phase alone, which asserts the move (a test's fixture
		 * may set one directly). */
		if (strstr(line, "phase = SESSION_") && strcmp(rel, "core/session.c") != 0 && !has_prefix(rel, "tests/"))
			layout_report(l, "%s:%u: sets a session's phase; only session_set_phase (core/session.c) may\n", rel,
				      line_no);
		/* Each concern's state (routing's route_types.h, replay's, each observer's) is written by its files
		 * alone. */
		for (size_t c = 0; c < TERN_ARRAY_LEN(layout_state_owners) && !has_prefix(rel, "tests/"); c++) {
			const struct layout_state_owner *o = &layout_state_owners[c];
			if (!layout_is_owner(o, rel) && layout_writes_state(line, o->fields, TERN_ARRAY_LEN(o->fields)))
				layout_report(l, "%s:%u: writes %s's state; only %s may\n", rel, line_no, o->concern,
					      o->owners_text);
		}
		if (!parse_include(line, name, sizeof(name), &is_quoted))
			continue;
		l->includes++;
		/* Routing's files share route_internal.h among themselves alone. */
		if ((strcmp(name, "route_internal.h") == 0 || strcmp(name, "routing/route_internal.h") == 0) &&
		    !has_prefix(rel, "routing/route"))
			layout_report(l, "%s:%u: includes route_internal.h; only routing's files (routing/route*.c) may\n", rel,
				      line_no);
		/* The ring's backends share ring_internal.h between them alone. */
		if (strstr(name, "ring_internal.h") != NULL && from != MODULE_RING)
			layout_report(l, "%s:%u: includes ring_internal.h; only ring/ may\n", rel, line_no);
		if ((strcmp(name, "liburing.h") == 0 || has_prefix(name, "liburing/")) && from != MODULE_RING)
			layout_report(l, "%s:%u: includes %s; only ring/ may use liburing\n", rel, line_no, name);
		char to_rel[LAYOUT_PATH_MAX];
		enum module to = layout_resolve(l, dir_rel, name, is_quoted, to_rel, sizeof(to_rel));
		if (from != MODULE_OTHER && to != MODULE_OTHER)
			layout_arrow(l, rel, to_rel);
		if (!layout_edge_is_allowed(from, to)) {
			layout_report(l, "%s:%u: %s includes \"%s\" from %s\n", rel, line_no, module_names[from], name,
				      module_names[to]);
		} else if (to != from && to != MODULE_OTHER && to != MODULE_BASE && strchr(strchr(to_rel, '/') + 1, '/')) {
			layout_report(l, "%s:%u: includes %s, which is not a root header of its module\n", rel, line_no,
				      to_rel);
		} else if (is_ordered(from) && is_ordered(to) && core_rank(rel) >= 0) {
			if (core_rank(to_rel) > core_rank(rel))
				layout_report(l, "%s:%u: includes %s, which is above it in core's order\n", rel, line_no,
					      to_rel);
		}
	}
	fclose(f);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void layout_walk(struct layout *l, const char *rel, int depth)
{
	cr_assert_lt(depth, LAYOUT_DEPTH_MAX, "folders nested too deep at %s", rel);
	char dir_path[LAYOUT_PATH_MAX];
	path_join(dir_path, sizeof(dir_path), l->root, rel);
	/* A build tree (meson puts one anywhere, often inside the source root) is not source. */
	char marker[LAYOUT_PATH_MAX];
	path_join(marker, sizeof(marker), dir_path, "meson-private");
	struct stat st;
	if (stat(marker, &st) == 0)
		return;
	DIR *dir = opendir(dir_path);
	cr_assert_not_null(dir, "opendir %s: %s", dir_path, strerror(errno));
	struct dirent *entry;
	while ((entry = readdir(dir)) != NULL) {
		if (entry->d_name[0] == '.')
			continue; /* ., .., .git, .ci and editors' files */
		char child_rel[LAYOUT_PATH_MAX];
		path_join(child_rel, sizeof(child_rel), rel, entry->d_name);
		char child_path[LAYOUT_PATH_MAX];
		path_join(child_path, sizeof(child_path), l->root, child_rel);
		if (lstat(child_path, &st) != 0)
			continue; /* removed while walking: another engineer's edit */
		if (S_ISDIR(st.st_mode)) {
			layout_walk(l, child_rel, depth + 1);
		} else if (S_ISREG(st.st_mode)) {
			bool is_c = ends_with(entry->d_name, ".c");
			bool is_h = ends_with(entry->d_name, ".h");
			if (!is_c && !is_h)
				continue;
			l->c_files += is_c;
			l->h_files += is_h;
			layout_check_file(l, child_path, child_rel);
		}
	}
	closedir(dir);
}

static struct layout *layout_check(const char *root)
{
	struct layout *l = calloc(1, sizeof(*l));
	cr_assert_not_null(l);
	l->root = root;
	cr_assert_not_null(realpath(root, l->root_resolved), "realpath %s: %s", root, strerror(errno));
	l->root_resolved_len = strlen(l->root_resolved);
	layout_walk(l, "", 0);
	layout_check_cycles(l);
	return l;
}

/* ---- the real tree ---- */

Test(layout, walk_finds_the_sources)
{
	struct layout *l = layout_check(TERN_SOURCE_ROOT);
	cr_assert_geq(l->c_files, 5, "found %u .c files under %s: the walk is looking in the wrong place",
		      l->c_files, TERN_SOURCE_ROOT);
	cr_assert_geq(l->h_files, 3, "found %u .h files", l->h_files);
	cr_assert_geq(l->includes, 20, "read %u #include lines", l->includes);
	free(l);
}

Test(layout, module_dependency_arrows_hold)
{
	struct layout *l = layout_check(TERN_SOURCE_ROOT);
	cr_assert_geq(l->c_files, 5);
	cr_assert_eq(l->violations, 0, "%u include(s) cross a module line:\n%s", l->violations, l->report);
	free(l);
}

/* ---- the checker on a tree with known violations ---- */

static char *fake_root(void)
{
	const char *tmp = getenv("TMPDIR");
	char *root = NULL;
	cr_assert_gt(asprintf(&root, "%s/tern-layout-XXXXXX", tmp && tmp[0] ? tmp : "/tmp"), 0);
	cr_assert_not_null(mkdtemp(root));
	return root;
}

static void fake_write(const char *root, const char *rel, const char *content)
{
	char path[LAYOUT_PATH_MAX];
	path_join(path, sizeof(path), root, rel);
	/* Create the folders along the way. */
	for (char *p = path + strlen(root) + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		cr_assert(mkdir(path, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
		*p = '/';
	}
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f, "create %s: %s", path, strerror(errno));
	fputs(content, f);
	fclose(f);
}

static int fake_remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path);
}

static void fake_remove(const char *root)
{
	cr_assert_eq(nftw(root, fake_remove_one, 16, FTW_DEPTH | FTW_PHYS), 0, "remove %s: %s", root,
		     strerror(errno));
}

static void fake_clean_tree(const char *root)
{
	fake_write(root, "base/base.h", "#include <stdint.h>\n");
	fake_write(root, "base/base.c", "#include \"base.h\"\n");
	fake_write(root, "core/proto.h", "#include \"base/base.h\"\n");
	fake_write(root, "core/proto.c", "#include \"proto.h\"\n#include \"pool/pool.h\"\n#include \"ring/ring.h\"\n");
	fake_write(root, "ring/ring.h", "#include \"base/base.h\"\n");
	fake_write(root, "ring/ring.c", "#include \"ring.h\"\n#include <liburing.h>\n");
	fake_write(root, "pool/pool.h", "# include \"base/base.h\"\n");
	fake_write(root, "pool/pool.c", "#include \"pool.h\"\n#include <xxhash.h>\n");
	fake_write(root, "replay/txlog.c", "#include \"base/base.h\"\n");
}

/* A fake root holding the clean tree, which each checker test then breaks its own way. */
static char *fake_tree(void)
{
	char *root = fake_root();
	fake_clean_tree(root);
	return root;
}

/* Checks the fake tree at root: exactly the reports in expected (each a part of a report line), then
 * removes the tree. */
static void fake_expect(char *root, const char *const *expected, size_t count)
{
	struct layout *l = layout_check(root);
	for (size_t i = 0; i < count; i++)
		cr_assert_not_null(strstr(l->report, expected[i]), "no report for %s in:\n%s", expected[i], l->report);
	cr_assert_eq(l->violations, count, "%u violations:\n%s", l->violations, l->report);
	free(l);
	fake_remove(root);
	free(root);
}

/* The members of `struct NAME {` in the file at path, counted at the struct's own level (comments
 * skipped): what a newcomer reads to know what the type holds. -1 when it is not there. */
static int layout_struct_members(const char *path, const char *name)
{
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
	char opening[128];
	snprintf(opening, sizeof(opening), "struct %s {", name);
	char line[1024];
	int depth = 0, members = -1;
	bool is_in = false, is_comment = false;
	while (fgets(line, sizeof(line), f)) {
		if (!is_in) {
			if (strncmp(line, opening, strlen(opening)) != 0)
				continue;
			is_in = true;
			depth = 1;
			members = 0;
			continue;
		}
		for (const char *p = line; *p; p++) {
			if (is_comment) {
				if (p[0] == '*' && p[1] == '/')
					is_comment = false, p++;
			} else if (p[0] == '/' && p[1] == '*') {
				is_comment = true, p++;
			} else if (*p == '{') {
				depth++;
			} else if (*p == '}') {
				depth--;
			} else if (*p == ';' && depth == 1) {
				members++;
			}
		}
		if (depth == 0)
			break;
	}
	fclose(f);
	return members;
}

Test(layout, struct_session_holds_at_most_45_direct_members)
{
	char path[LAYOUT_PATH_MAX];
	path_join(path, sizeof(path), TERN_SOURCE_ROOT, "core/session.h");
	int members = layout_struct_members(path, "session");
	cr_assert_gt(members, 10, "struct session not found in %s (%d)", path, members);
	/* (a concern's state is a type of its own, in the session as one member: issue 22) */
	cr_assert_leq(members, 45, "struct session has %d direct members", members);
}

Test(layout, struct_members_are_counted_at_the_structs_own_level)
{
	char *root = fake_root();
	char path[LAYOUT_PATH_MAX];
	path_join(path, sizeof(path), root, "s.h");
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("struct other {\n\tint x;\n};\nstruct session {\n\tint a; /* b; c; */\n\tstruct {\n\t\tint d;\n"
	      "\t\tint e;\n\t} inner;\n\t/* int f;\n\t * int g; */\n\tint h, i;\n};\nint after;\n", f);
	fclose(f);
	cr_assert_eq(layout_struct_members(path, "session"), 3, "a, inner and h/i");
	cr_assert_eq(layout_struct_members(path, "missing"), -1);
	unlink(path);
	rmdir(root);
	free(root);
}

Test(layout, checker_passes_a_tree_that_keeps_the_arrows)
{
	char *root = fake_tree();
	struct layout *l = layout_check(root);
	cr_assert_eq(l->c_files, 5);
	cr_assert_eq(l->violations, 0, "%s", l->report);
	free(l);
	fake_remove(root);
	free(root);
}

Test(layout, checker_reports_each_crossing_as_file_and_line)
{
	char *root = fake_tree();
	/* Each of these breaks one rule; the last two reach core only through the -Icore path. */
	fake_write(root, "core/session.c", "#include \"proto.h\"\n\n#include <liburing.h>\n");
	fake_write(root, "ring/ring_extra.c", "#include \"ring.h\"\n#include \"pool/pool.h\"\n#include \"proto.h\"\n");
	fake_write(root, "pool/opener.c", "#include \"pool.h\"\n  #  include \"replay/txlog.h\"\n"
				    "#include \"core/proto.h\"\n#include <proto.h>\n");
	fake_write(root, "replay/txlog.h", "#include \"ring/ring.h\"\n");
	fake_write(root, "base/log.c", "#include \"base.h\"\n#include \"../core/proto.h\"\n");
	/* (core/proto.c, which includes pool and ring, is not among them: core may include every module) */
	static const char *const expected[] = {
		"core/session.c:3: ",      "ring/ring_extra.c:2: ", "ring/ring_extra.c:3: ", "pool/opener.c:2: ",
		"pool/opener.c:3: ",       "pool/opener.c:4: ",     "replay/txlog.h:1: ",    "base/log.c:2: ",
	};
	fake_expect(root, expected, TERN_ARRAY_LEN(expected));
}

Test(layout, checker_lets_only_session_c_set_a_sessions_phase)
{
	char *root = fake_tree();
	fake_write(root, "core/proto.c", "#include \"proto.h\"\n\ts->phase = SESSION_READY;\n");
	fake_write(root, "core/session.c", "#include \"proto.h\"\n\ts->phase = to;\n\tx.phase = SESSION_READY;\n");
	fake_write(root, "tests/unit/test_x.c", "\ts->phase = SESSION_READY; /* a fixture */\n");
	static const char *const expected[] = {
		"core/proto.c:2: sets a session's phase",
	};
	fake_expect(root, expected, TERN_ARRAY_LEN(expected));
}

Test(layout, checker_reports_an_include_cycle_between_units)
{
	char *root = fake_tree();
	fake_write(root, "pool/db.h", "#include \"pool.h\"\n");
	fake_write(root, "pool/db.c", "#include \"db.h\"\n");
	fake_write(root, "pool/pool.c", "#include \"pool.h\"\n#include \"db.h\"\n");
	static const char *const expected[] = {
		"include cycle: pool/",
	};
	fake_expect(root, expected, TERN_ARRAY_LEN(expected));
}

Test(layout, checker_keeps_the_wings_in_their_order)
{
	char *root = fake_tree();
	fake_write(root, "core/session.h", "#include \"proto.h\"\n");
	fake_write(root, "auth/auth.h", "#include \"base.h\"\n");
	fake_write(root, "auth/auth.c", "#include \"auth.h\"\n#include \"core/proto.h\"\n#include \"pool/pool.h\"\n"
					"#include \"core/session.h\"\n");
	fake_write(root, "admin/admin.h", "#include \"session.h\"\n#include \"auth.h\"\n");
	fake_write(root, "core/sendq.c", "#include \"proto.h\"\n#include \"auth.h\"\n#include \"admin.h\"\n");
	fake_write(root, "main/main.c", "#include \"admin.h\"\n#include \"session.h\"\n");
	static const char *const expected[] = {
		"auth/auth.c:2: auth includes \"core/proto.h\" from core",
		"auth/auth.c:4: auth includes \"core/session.h\" from core",
		"core/sendq.c:3: core includes \"admin.h\" from admin",
	};
	fake_expect(root, expected, TERN_ARRAY_LEN(expected));
}

Test(layout, checker_lets_only_routings_files_write_its_state)
{
	char *root = fake_tree();
	fake_write(root, "routing/route.c", "#include \"core/proto.h\"\n\ts->routing->state = 1;\n");
	fake_write(root, "core/sendq.c", "#include \"proto.h\"\n\tif (s->routing->state == 1)\n\t\tf(&s->routing->held);\n"
					 "\tleg->route->is_reply_guarded = true;\n\ts->routing->split.tx.has_write |= x;\n"
					 "/* see route.c */ x.routing->n++;\n");
	static const char *const expected[] = {
		"core/sendq.c:4: writes routing's state",
		"core/sendq.c:5: writes routing's state",
		"core/sendq.c:6: writes routing's state",
	};
	fake_expect(root, expected, TERN_ARRAY_LEN(expected));
}

Test(layout, checker_lets_only_a_concerns_files_write_its_state)
{
	char *root = fake_tree();
	fake_write(root, "core/observer_params.c", "#include \"proto.h\"\n\ts->params.is_search_path_mentioned |= x;\n");
	fake_write(root, "core/sendq.c", "#include \"proto.h\"\n\ts->params.is_search_path_mentioned |= x;\n"
					 "\tif (s->replay->preamble.len > 0)\n\t\ts->replay->preamble.len = 0;\n\ts->journal->count++;\n");
	static const char *const expected[] = {
		"core/sendq.c:2: writes params's state",
		"core/sendq.c:4: writes Transaction Replay's state",
		"core/sendq.c:5: writes the journal's state",
	};
	fake_expect(root, expected, TERN_ARRAY_LEN(expected));
}

Test(layout, checker_keeps_routings_shared_header_to_routing)
{
	char *root = fake_tree();
	fake_write(root, "routing/route_internal.h", "#include \"core/proto.h\"\n");
	fake_write(root, "routing/route_guard.c", "#include \"route_internal.h\"\n");
	fake_write(root, "core/recover.c", "#include \"proto.h\"\n#include \"routing/route_internal.h\"\n");
	fake_write(root, "core/session.c", "#include \"proto.h\"\n#include \"route_internal.h\"\n"); /* (the compiler refuses it too) */
	static const char *const expected[] = {
		"core/recover.c:2: includes route_internal.h",
		"core/recover.c:2: core includes \"routing/route_internal.h\" from routing",
		"core/session.c:2: includes route_internal.h",
	};
	fake_expect(root, expected, TERN_ARRAY_LEN(expected));
}

Test(layout, checker_keeps_routing_in_its_place_among_cores_layers)
{
	char *root = fake_tree();
	fake_write(root, "routing/route_types.h", "#include \"base.h\"\n");
	fake_write(root, "routing/split.h", "#include \"base.h\"\n");
	fake_write(root, "core/session.h", "#include \"proto.h\"\n#include \"routing/route_types.h\"\n"); /* up */
	fake_write(root, "core/session_relay.h", "#include \"session.h\"\n");
	fake_write(root, "routing/route.h", "#include \"core/session.h\"\n");                    /* down: fine */
	fake_write(root, "routing/polar.h", "#include \"split.h\"\n");                           /* down: fine */
	fake_write(root, "routing/route.c", "#include \"core/session_relay.h\"\n#include \"polar.h\"\n"); /* 2: up */
	fake_write(root, "admin/admin.h", "#include \"base.h\"\n");
	fake_write(root, "auth/auth.h", "#include \"base.h\"\n");
	fake_write(root, "replay/txlog.h", "#include \"base.h\"\n");
	fake_write(root, "routing/monitor.c", "#include \"admin/admin.h\"\n#include \"replay/txlog.h\"\n"
					      "#include \"pool/pool.h\"\n#include \"auth.h\"\n#include \"core/proto.h\"\n");
	fake_write(root, "core/leg.c", "#include \"routing/route.h\"\n");  /* core lies below routing */
	fake_write(root, "auth/auth.c", "#include \"auth.h\"\n#include \"routing/route_types.h\"\n");
	fake_write(root, "pool/pool.c", "#include \"pool.h\"\n#include <xxhash.h>\n#include \"routing/split.h\"\n");
	fake_write(root, "routing/gadget.c", "#include \"route.h\"\n");     /* not in the order */
	static const char *const expected[] = {
		"routing/route.c:2: includes routing/polar.h, which is above it",
		"routing/monitor.c:1: routing includes \"admin/admin.h\" from admin",
		"routing/monitor.c:2: routing includes \"replay/txlog.h\" from replay",
		"core/leg.c:1: core includes \"routing/route.h\" from routing",
		"core/session.h:2: core includes \"routing/route_types.h\" from routing",
		"auth/auth.c:2: auth includes \"routing/route_types.h\" from routing",
		"pool/pool.c:3: pool includes \"routing/split.h\" from routing",
		"routing/gadget.c: its unit is not in core's declared order",
	};
	fake_expect(root, expected, TERN_ARRAY_LEN(expected));
}

Test(layout, checker_keeps_replays_library_below_and_its_wing_in_its_place)
{
	char *root = fake_tree();
	fake_write(root, "replay/journal_record.h", "#include \"base.h\"\n");
	fake_write(root, "replay/decide.c", "#include \"journal_record.h\"\n#include \"recover.h\"\n"); /* up */
	fake_write(root, "core/session.h", "#include \"proto.h\"\n");
	fake_write(root, "core/session_relay.h", "#include \"session.h\"\n");
	fake_write(root, "routing/route.h", "#include \"core/session.h\"\n");
	fake_write(root, "replay/journal.h", "#include \"journal_record.h\"\n#include \"core/proto.h\"\n"); /* fine */
	fake_write(root, "replay/recover.h", "#include \"core/session.h\"\n#include \"journal.h\"\n"); /* fine */
	fake_write(root, "replay/recover.c", "#include \"recover.h\"\n#include \"core/session_relay.h\"\n"
					     "#include \"ring/ring.h\"\n#include \"routing/route.h\"\n");
	fake_write(root, "replay/journal_rerun.c", "#include \"journal.h\"\n#include \"recover.h\"\n"); /* 2: up */
	fake_write(root, "core/leg.c", "#include \"proto.h\"\n#include \"replay/recover.h\"\n"); /* up */
	fake_write(root, "core/worker.c", "#include \"replay/recover.h\"\n");                            /* up */
	fake_write(root, "routing/route.c", "#include \"route.h\"\n#include \"replay/journal.h\"\n");
	static const char *const expected[] = {
		"replay/decide.c:2: replay includes \"recover.h\" from replay wing",
		"replay/journal_rerun.c:2: includes replay/recover.h, which is above it",
		"replay/recover.c:3: replay wing includes \"ring/ring.h\" from ring",
		"core/leg.c:2: core includes \"replay/recover.h\" from replay wing",
		"core/worker.c:1: core includes \"replay/recover.h\" from replay wing",
		"routing/route.c:2: routing includes \"replay/journal.h\" from replay wing",
	};
	fake_expect(root, expected, TERN_ARRAY_LEN(expected));
}

Test(layout, checker_keeps_cores_declared_order_and_root_headers)
{
	char *root = fake_tree();
	fake_write(root, "core/session.h", "#include \"proto.h\"\n");                     /* down: fine */
	fake_write(root, "core/worker.c", "#include \"session.h\"\n");                    /* down: fine */
	fake_write(root, "core/sendq.c", "#include \"proto.h\"\n#include \"session.h\"\n"); /* line 2: up */
	fake_write(root, "core/session.c", "#include \"session.h\"\n#include \"worker.h\"\n");
	fake_write(root, "core/worker.h", "#include \"session.h\"\n");
	fake_write(root, "core/gadget.c", "#include \"proto.h\"\n");                      /* not in the order */
	fake_write(root, "pool/inner/detail.h", "#include \"base/base.h\"\n");
	fake_write(root, "core/params.c", "#include \"pool/inner/detail.h\"\n");         /* not a root header */
	static const char *const expected[] = {
		"core/sendq.c:2: includes core/session.h, which is above it",
		"core/session.c:2: includes core/worker.h, which is above it",
		"core/gadget.c: its unit is not in core's declared order",
		"core/params.c:1: includes pool/inner/detail.h, which is not a root header",
		"include cycle: core/worker -> core/session -> core/worker", /* (session.c's up-include closes it) */
	};
	fake_expect(root, expected, TERN_ARRAY_LEN(expected));
}

Test(layout, checker_skips_build_trees_inside_the_root)
{
	char *root = fake_tree();
	fake_write(root, "build/meson-private/coredata.dat", "");
	fake_write(root, "build/pool/generated.c", "#include <liburing.h>\n");
	struct layout *l = layout_check(root);
	cr_assert_eq(l->violations, 0, "%s", l->report);
	cr_assert_eq(l->c_files, 5);
	free(l);
	fake_remove(root);
	free(root);
}
