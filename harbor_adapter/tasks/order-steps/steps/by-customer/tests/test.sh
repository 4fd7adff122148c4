#!/bin/bash
# reward.json: the step's reward and which of its two files is right
expected=$'ana 15.50\nbo 17.25\ncy 21.25'
total=0; table=0
[ "$(cat /app/total.txt 2>/dev/null)" = "54.00" ] && total=1
[ "$(cat /app/by_customer.txt 2>/dev/null)" = "$expected" ] && table=1
printf '{"reward": %d, "total_ok": %d, "by_customer_ok": %d}\n' $((total * table)) $total $table \
  > /logs/verifier/reward.json
