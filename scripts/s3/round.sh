#!/usr/bin/env bash
# One batched GPU round of session 3: each part's script with its own carried
# build, logs tarred into $OUT/round.tgz (few files come back), summaries last.
#   OUT=... bash scripts/s3/round.sh part:build-dir[:args] ...
set -u
mkdir -p "$OUT/logs"
for spec in "$@"; do
  IFS=: read -r part build args <<<"$spec"
  # part=NAME@SECONDS bounds the part as a whole
  limit=${part#*@}; [ "$limit" = "$part" ] && limit=3000; part=${part%@*}
  echo "=== $part ($build, at most ${limit}s) $(date +%T)"
  # shellcheck disable=SC2086
  OUT="$OUT/logs" timeout "$limit" bash "scripts/s3/$part.sh" "$build" $args >"$OUT/logs/$part.stdout" 2>&1
  echo "rc=$?"
done
(cd "$OUT" && tar czf round.tgz logs && rm -rf logs/*/ && true)
for spec in "$@"; do
  IFS=: read -r part build args <<<"$spec"
  part=${part%@*}
  echo "##### $part"; tail -n "${TAIL:-30}" "$OUT/logs/$part.stdout"
done
rm -rf "$OUT/logs"
