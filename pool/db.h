/*
 * db.h — what pool.c asks of the pool's keys (db.c): a pool_db freed with its last session and connection.
 */
#ifndef TERN_POOL_DB_H
#define TERN_POOL_DB_H

#include "pool.h"

/* Frees db (its settings, its secret wiped, its groups' share), which nothing can reach any more. */
void pool_db_free(struct pool_db *db);
/* Frees db when nobody holds it and no server has a connection of it open, opening or waited for; true
 * when it did. Under pool->dbs_lock (it takes each server's lock in turn). */
bool pool_db_free_if_unused(struct pool *pool, struct pool_db *db);

#endif
