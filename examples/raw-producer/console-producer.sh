#!/usr/bin/env bash
# Submit or delete a trainhub job with Kafka's own console producer: no trainhub at all.
#
#   ./console-producer.sh BOOTSTRAP submit job.json      # the job as JSON (one document)
#   ./console-producer.sh BOOTSTRAP delete UID           # UID: see docs/events.md "Keys"
#
# KAFKA_CONSOLE_PRODUCER names the tool (default: kafka-console-producer.sh from a Kafka
# distribution's bin/); TRAINHUB_PREFIX the topics' prefix (default trainhub). Each line the
# tool reads is "HEADERS<TAB>KEY<TAB>VALUE" with parse.headers and parse.key on; headers are
# "name:value" pairs separated by commas (so no value here holds a comma).
set -euo pipefail
bootstrap=$1 action=$2 target=$3
producer=${KAFKA_CONSOLE_PRODUCER:-kafka-console-producer.sh}
topic=${TRAINHUB_PREFIX:-trainhub}.jobs

case $action in
  submit)
    # One line of JSON for the body; the key is the job's uid (printed on stdout).
    read -r uid body < <(python3 - "$target" <<'PY'
import json, sys, uuid
job = json.load(open(sys.argv[1]))
meta = job["metadata"]
ns = uuid.UUID("6f1d4c62-3f0e-4b8e-9a53-9d7a1f2f7a10")
uid = meta.get("uid") or str(uuid.uuid5(ns, f"{meta.get('namespace', 'default')}/{meta['name']}"))
print(uid, json.dumps({"job": job}, separators=(",", ":")))
PY
)
    type=io.trainhub.job.submitted ;;
  delete)
    uid=$target body="{\"uid\":\"$uid\"}" type=io.trainhub.job.deleted ;;
  *) echo "usage: $0 BOOTSTRAP submit FILE.json | delete UID" >&2; exit 2 ;;
esac

id=$(python3 -c 'import uuid; print(uuid.uuid4())')
headers="ce_specversion:1.0,ce_id:$id,ce_source:examples/console-producer,ce_type:$type"
headers+=",ce_subject:$uid,content-type:application/json"
printf '%s\t%s\t%s\n' "$headers" "$uid" "$body" | "$producer" \
  --bootstrap-server "$bootstrap" --topic "$topic" \
  --property parse.headers=true --property parse.key=true \
  --producer-property acks=all
echo "$uid"
