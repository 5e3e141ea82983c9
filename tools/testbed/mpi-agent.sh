#!/usr/bin/env bash
# Open MPI's launch agent for the testbed (plm_rsh_agent): where mpirun would
# ssh to a host, this enters the host's namespaces instead. Open MPI calls it
# as ssh would be called, `mpi-agent.sh HOST COMMAND-LINE...`, the command
# line being for a shell on the host; hosts are named h1, h2, ... (the
# testbed's name comes from SMB_TESTBED_NAME, as for testbed.sh).
host=$1
shift
exec "$(dirname "$0")/testbed.sh" exec "$host" sh -c "$*"
