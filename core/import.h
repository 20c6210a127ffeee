/*
 * import.h — `tern --import-pgbouncer pgbouncer.ini`: reads a PgBouncer configuration and writes the
 * tern.ini that does the same, naming every setting it cannot carry over (on `notes`, one line each, and
 * as comments at the end of the output). [databases] entries keep their names, dbname, user, password
 * and pool settings; the server of the first entry that names one becomes [servers] primary, and each
 * other server another [servers] key (server2, server3, ...) that its entries name with server=.
 *
 * Threads: main's, before anything starts. Never: opens sockets or changes files.
 */
#ifndef TERN_IMPORT_H
#define TERN_IMPORT_H

#include <stdio.h>

/* Lines of output and notes one import may produce before it stops: far beyond any pgbouncer.ini. */
#define IMPORT_LINES_MAX 8192u

/* Writes tern.ini to `out` and the notes to `notes`. 0, or <0 with a message on `notes` (the file cannot
 * be read or parsed). */
int import_pgbouncer(const char *path, FILE *out, FILE *notes);

#endif
