#!/usr/bin/env bash
# Builds the Dockerfile's image and checks that it serves: a throwaway PostgreSQL container and a tern
# container on one user-defined network, then psql through tern from a third. Where docker exists
# (not part of the test suite: the suite runs where no docker daemon may be). Everything it starts is
# named tern-smoke-<pid> and removed at exit.
#   bench/docker_smoke.sh            # build and check
# Docker's default seccomp profile refuses io_uring (tern would fall back to epoll): the tern container
# runs with --security-opt seccomp=unconfined, so it is io_uring that is checked (the README says why).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! docker info >/dev/null 2>&1; then
	echo "docker_smoke: no docker daemon here (docker info fails): nothing to check" >&2
	exit 77
fi
name=tern-smoke-$$
cleanup() {
	docker rm -f "$name-tern" "$name-pg" >/dev/null 2>&1 || true
	docker network rm "$name" >/dev/null 2>&1 || true
	rm -rf "$etc"
}
etc=$(mktemp -d)
trap cleanup EXIT

echo "==> docker build -t tern:smoke ."
docker build -t tern:smoke .
docker network create "$name" >/dev/null
echo "==> PostgreSQL 15 (trust on the network)"
docker run -d --name "$name-pg" --network "$name" -e POSTGRES_HOST_AUTH_METHOD=trust postgres:15 >/dev/null
for _ in $(seq 60); do
	docker exec "$name-pg" pg_isready -U postgres >/dev/null 2>&1 && break
	sleep 1
done
cat >"$etc/tern.ini" <<INI
[tern]
listen = *:6432
[servers]
primary = host=$name-pg port=5432
INI
chmod 755 "$etc"
chmod 644 "$etc/tern.ini"
echo "==> tern (user tern, seccomp unconfined for io_uring)"
docker run -d --name "$name-tern" --network "$name" --security-opt seccomp=unconfined \
	-v "$etc:/etc/tern:ro" tern:smoke >/dev/null
user=$(docker exec "$name-tern" id -un)
[[ $user == tern ]] || { echo "docker_smoke: tern runs as $user, not tern" >&2; exit 1; }
for _ in $(seq 30); do
	if out=$(docker run --rm --network "$name" postgres:15 psql -h "$name-tern" -p 6432 -U postgres -Atc \
		"select 'through tern: ' || version()" 2>/dev/null); then
		echo "$out"
		echo "docker_smoke: ok (tern as user $user)"
		exit 0
	fi
	sleep 1
done
docker logs "$name-tern" >&2
echo "docker_smoke: no answer through tern" >&2
exit 1
