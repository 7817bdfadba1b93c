#!/bin/bash
# summarize state runs: per rev, per row: median of rounds' median ratio (min-max)
cd "$1"
for rev in d580890 c475af4 210d7d4; do
  for row in kvbuf engine-overlay; do
    vals=$(cat state-$rev-run*.txt 2>/dev/null | grep "pair/$row-" | awk -v r="$row/atomic-words" '{for(i=1;i<=NF;i++) if($(i)==r) print $(i-1)}' | sort -g)
    n=$(echo "$vals" | grep -c .)
    [ "$n" = 0 ] && continue
    med=$(echo "$vals" | awk '{a[NR]=$1} END{ if(NR%2) print a[(NR+1)/2]; else printf "%.3f\n",(a[NR/2]+a[NR/2+1])/2}')
    echo "$rev $row: $med ($(echo "$vals" | head -1)-$(echo "$vals" | tail -1)) n=$n"
  done
done
