#!/usr/bin/env bash
# `uroce dump` on the kernel rxe captures, on frames uroce builds, and on
# files it must refuse. Arguments: the uroce binary, write_sample_frames,
# then the capture files.
set -uo pipefail
uroce=$1 write_sample_frames=$2
shift 2
captures=("$@")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

((${#captures[@]} >= 13)) || fail "expected the 13 capture files, got ${#captures[@]}"

summary_re='^frames ([0-9]+), roce ([0-9]+), icrc_ok ([0-9]+), icrc_bad 0, malformed 0$'
for f in "${captures[@]}"; do
  out=$("$uroce" dump "$f"); status=$?
  [[ $status -eq 0 ]] || fail "$f: exit $status"
  last=$(tail -n 1 <<<"$out")
  if [[ $last =~ $summary_re ]]; then
    frames=${BASH_REMATCH[1]} roce=${BASH_REMATCH[2]} ok=${BASH_REMATCH[3]}
    lines=$(($(wc -l <<<"$out") - 1))
    [[ $lines -eq $frames ]] || fail "$f: $lines frame lines for $frames frames"
    [[ $roce -eq $ok && $roce -gt 0 ]] || fail "$f: $last"
    [[ $(grep -c ' icrc ok$' <<<"$out") -eq $ok ]] || fail "$f: 'icrc ok' lines do not match the count"
  else
    fail "$f: last line is '$last'"
  fi
  json_last=$("$uroce" dump --json "$f" | tail -n 1)
  [[ $json_last =~ ^\{\"frames\":[0-9]+,\"roce\":[0-9]+,\"icrc_ok\":[0-9]+,\"icrc_bad\":0,\"malformed\":0\}$ ]] ||
    fail "$f --json: last line is '$json_last'"
done

# Frames uroce builds decode with good ICRCs too.
"$write_sample_frames" "$tmp/built.pcap" >/dev/null || fail "write_sample_frames failed"
out=$("$uroce" dump "$tmp/built.pcap") || fail "built frames: exit $?"
[[ $(tail -n 1 <<<"$out") == "frames 248, roce 248, icrc_ok 248, icrc_bad 0, malformed 0" ]] ||
  fail "built frames: $(tail -n 1 <<<"$out")"
# RoCEv2's CNP (0x81, four frames) is decoded by name.
[[ $(grep -c ' CNP CONGESTION_NOTIFICATION .* icrc ok$' <<<"$out") -eq 4 ]] ||
  fail "built frames: CNP lines: $(grep 'CNP' <<<"$out")"
# IBTA 1.5's ATOMIC WRITE (0x1D, four frames): its RETH and its 8 bytes.
[[ $(grep -cE ' RC ATOMIC_WRITE .* dma_len 8  data [0-9a-f]{16}  icrc ok$' <<<"$out") -eq 4 ]] ||
  fail "built frames: ATOMIC WRITE lines: $(grep 'ATOMIC_WRITE' <<<"$out")"
[[ $("$uroce" dump --json "$tmp/built.pcap" | grep -cE '"opcode":29,.*"atomic_write_data":"[0-9a-f]{16}"') -eq 4 ]] ||
  fail "built frames --json: no atomic_write_data"

# One payload byte changed: a bad ICRC, exit 1. rc_pingpong_64.pcap frame 1:
# 24-byte file header, 16-byte record header, 42 bytes of Ethernet/IP/UDP,
# 12 of BTH; its payload is 0x7b bytes.
rc64=$(printf '%s\n' "${captures[@]}" | grep '/rc_pingpong_64.pcap$')
n=$("$uroce" dump "$rc64" | tail -n 1 | sed -E 's/^frames ([0-9]+),.*/\1/')
cp "$rc64" "$tmp/corrupt.pcap" && chmod u+w "$tmp/corrupt.pcap"
printf '\x00' | dd of="$tmp/corrupt.pcap" bs=1 seek=$((24 + 16 + 42 + 12 + 5)) conv=notrunc status=none
out=$("$uroce" dump "$tmp/corrupt.pcap"); status=$?
[[ $status -eq 1 ]] || fail "corrupted payload: exit $status, want 1"
[[ $(tail -n 1 <<<"$out") == "frames $n, roce $n, icrc_ok $((n - 1)), icrc_bad 1, malformed 0" ]] ||
  fail "corrupted payload: $(tail -n 1 <<<"$out")"
grep -q '^1  .*icrc BAD' <<<"$out" || fail "corrupted payload: frame 1 not reported bad"

# The TTL changed: the ICRC does not cover it, the IPv4 checksum does, so the
# frame is malformed (bad IPv4 header checksum), exit 1.
cp "$rc64" "$tmp/ttl.pcap" && chmod u+w "$tmp/ttl.pcap"
printf '\x01' | dd of="$tmp/ttl.pcap" bs=1 seek=$((24 + 16 + 14 + 8)) conv=notrunc status=none
out=$("$uroce" dump "$tmp/ttl.pcap"); status=$?
[[ $status -eq 1 ]] || fail "TTL changed: exit $status, want 1"
[[ $(tail -n 1 <<<"$out") == "frames $n, roce $n, icrc_ok $((n - 1)), icrc_bad 0, malformed 1" ]] ||
  fail "TTL changed: $(tail -n 1 <<<"$out")"
grep -q '^1  .*malformed: bad IPv4 header checksum$' <<<"$out" || fail "TTL changed: frame 1 line"

# Files it must refuse, with a message and exit 2.
expect_refused() {  # description, expected message part, args...
  local what=$1 want=$2
  shift 2
  local err status
  err=$("$uroce" dump "$@" 2>&1 >/dev/null); status=$?
  [[ $status -eq 2 ]] || fail "$what: exit $status, want 2"
  grep -q "$want" <<<"$err" || fail "$what: message '$err' lacks '$want'"
}
expect_refused "missing file" "cannot open" "$tmp/no-such-file.pcap"
echo "hello, not a capture" >"$tmp/text.pcap"
expect_refused "text file" "not a pcap file" "$tmp/text.pcap"
head -c 1000 "$rc64" >"$tmp/truncated.pcap"
expect_refused "truncated file" "truncated" "$tmp/truncated.pcap"
head -c 10 "$rc64" >"$tmp/short.pcap"
expect_refused "truncated header" "truncated pcap file header" "$tmp/short.pcap"
expect_refused "no file" "usage" 
expect_refused "unknown option" "unknown option" --frobnicate "$rc64"

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "uroce dump: all checks passed"
