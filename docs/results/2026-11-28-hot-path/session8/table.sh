#!/bin/bash
# session 8: one row per run: routers, HAProxy, beyond, Valkey ms/req; context switches per request (20 s window at the run's req/s)
# $1 = runs directory
cd "$1"
printf "| run | routers ms/req | HAProxy ms/req | beyond HAProxy | Valkey ms/req | busiest router | voluntary / req | all / req |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
for r in $(ls -d */ | tr -d / ); do
  [ -f $r/report.md ] || continue
  cpu=$(grep "^| cache_aware ×" $r/report.md | tail -1)
  rps=$(grep "^| cache_aware ×" $r/report.md | head -1 | awk -F'|' '{print $13}' | tr -d ' ')
  routers=$(echo "$cpu" | awk -F'|' '{print $9}' | tr -d ' ')
  busiest=$(echo "$cpu" | awk -F'|' '{print $4}' | tr -d ' ')
  hap=$(echo "$cpu" | awk -F'|' '{print $13}' | tr -d ' ')
  valkey=$(echo "$cpu" | awk -F'|' '{print $6}' | tr -d ' ')
  beyond=$(echo "$routers $hap" | awk '{printf "%.2f", $1-$2}')
  if [ -f $r.ctx ]; then
    read vol all < <(awk '/^thread/{v+=$5; n+=$7} END{print v, v+n}' $r.ctx)
    volr=$(echo "$vol $rps" | awk '{printf "%.1f", $1/($2*20)}'); allr=$(echo "$all $rps" | awk '{printf "%.1f", $1/($2*20)}')
  else volr=-; allr=-; fi
  echo "| $r | $routers | $hap | $beyond | $valkey | $busiest | $volr | $allr |"
done
