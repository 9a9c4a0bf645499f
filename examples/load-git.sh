#!/bin/sh
# An example loader for `fairway worker` on a `visits.git` queue:
#
#   fairway worker --queue visits.git --concurrency 4 -- ./examples/load-git.sh
#
# The visit task's payload (stdin) is a JSON object with the origin's "url".
# The loader takes a snapshot of the origin's branches (`git ls-remote`),
# names it by the hash of the list, and prints the outcome as its last line;
# the scheduler compares the snapshot with the origin's last one to tell an
# eventful visit from an uneventful one. A real loader would fetch the
# objects and store them before printing the outcome.
#
# Exit 0 with an outcome line completes the task. A failure that may pass
# (the forge is down, the network is cut) exits 1: the task is retried after
# the queue's backoff, with the last line of stderr as the reason.
set -u

payload=$(cat)
# The payload is written by the scheduler: {"url": "...", ...}. A loader in
# a language with a JSON parser should use it; sed keeps this one POSIX.
url=$(printf '%s' "$payload" | sed -n 's/.*"url" *: *"\([^"]*\)".*/\1/p')
if [ -z "$url" ]; then
  echo "the payload has no \"url\": $payload" >&2
  exit 1
fi

echo "visiting $url (task $FAIRWAY_TASK_ID, attempt $FAIRWAY_ATTEMPT)" >&2
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
if ! refs=$(GIT_TERMINAL_PROMPT=0 timeout 600 git ls-remote -- "$url" 2>"$errors"); then
  reason=$(grep -m 1 '^fatal:' "$errors" || tail -n 1 "$errors")
  if grep -q -e 'not found' -e 'does not appear to be a git repository' "$errors"; then
    echo "$url is gone: $reason" >&2
    echo '{"status": "not_found"}'
    exit 0
  fi
  echo "git ls-remote $url: $reason" >&2
  exit 1
fi
snapshot=$(printf '%s\n' "$refs" | sha1sum | cut -c1-40)
echo "$url: $(printf '%s\n' "$refs" | grep -c .) refs, snapshot $snapshot" >&2
printf '{"status": "eventful", "snapshot": "%s"}\n' "$snapshot"
