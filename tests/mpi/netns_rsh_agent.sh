#!/bin/sh
# mpirun's remote-shell agent for tests whose "hosts" are network namespaces: mpirun calls
# `agent HOST COMMAND...`; the daemon it starts runs in namespace HOST under softrdma-run
# ($SOFTRDMA_RUN), through a shell as ssh would run it.
host=$1
shift
exec ip netns exec "$host" "${SOFTRDMA_RUN:?}" sh -c "$*"
