#!/bin/sh
# Open MPI's rsh agent in uroce guests (rxe_vm.py --kind uroce; mpirun
# --mca plm_rsh_agent /usr/lib/uroce-vm/guest_rsh.sh): ssh's place between
# two VMs of the test network. As ssh does, it joins COMMAND's words into one
# line and hands it to a shell on HOST, whose guest_rsh_server.sh (started
# by uroce_guest.sh with busybox nc on port 2222) runs it; the command's
# output comes back over the same connection until it ends.
#   args: HOST COMMAND...
host=$1
shift
printf '%s\n' "$*" | exec nc "$host" 2222
