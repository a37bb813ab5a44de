#!/bin/sh
# The server side of guest_rsh.sh: busybox nc -ll -e runs it per connection,
# the connection on stdin and stdout. The first line is the command.
IFS= read -r command
exec /bin/sh -c "$command" </dev/null 2>&1
