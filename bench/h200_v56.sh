#!/usr/bin/env bash
# v56: where the short contexts' scoring time goes (index_scoring r8 W2 at 128K: 27.3 us from
# the queries' end against r4's 15.1, DeepGEMM's 19.6 for the whole kernel), and the
# selection's fixed part (select_hist r8 64K 15.1 us against 512K 19.9).
#   PART=a: timelines of index_scoring r8 / r4 at 128K W2, r8 128K W1, r8 256K W2;
#           select_hist r8 at 64K and 512K
#   PART=d: b trimmed to ~380 s of device time (rows 8): index_scoring 512K W1 A/B/C/D,
#           128K W2 A/B/E, digests equal, top-k through the fused index, the new timeline with
#           its jobs (not run in v56: no machine could be started)
#   PART=b: the queries staged a record a thread by 16-byte loads (ix_score.query_records,
#           the new default) against the word-by-word form (=0): digests equal, A/Bs of
#           index_scoring r8 / r4 / r2 (128K W2, 512K W1 / W2), the fused index r8 512K,
#           top-k exact through the fused index, a timeline of the new default; beside
#           them C: the first 4 pages of each entry asked of the L2 before the queries' wait
#           (ix_score.warm_first=4), D: the key projection in 48 jobs of one block
#           (launch.k_splits=48; the default 24 of 2), E: W2's runs' tails to the split's
#           last jobs (ix_score.tails_last=1)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-24}
packed_logs "v56${PART:-a}"
TL="python3 -m tools.time_layers --config glm5 --backend cuda --reps 5"
if [ "${PART:-a}" = a ]; then
OUT=$LOGS step tl_r8_128k_w2 80 $TL --kind index_scoring --rows 8 --pos 131071 --workload W2 --timeline; pack
OUT=$LOGS step tl_r4_128k_w2 80 $TL --kind index_scoring --rows 4 --pos 131071 --workload W2 --timeline; pack
OUT=$LOGS step tl_r8_128k_w1 80 $TL --kind index_scoring --rows 8 --pos 131071 --workload W1 --timeline; pack
OUT=$LOGS step tl_r8_256k_w2 80 $TL --kind index_scoring --rows 8 --pos 262143 --workload W2 --timeline; pack
OUT=$LOGS step tl_sel_64k 80 $TL --kind select_hist --rows 8 --pos 65535 --timeline; pack
OUT=$LOGS step tl_sel_512k 80 $TL --kind select_hist --rows 8 --pos 524287 --timeline; pack
elif [ "${PART}" = d ]; then
OLD=ix_score.query_records=0
OUT=$LOGS step vs_512k 90 $TL --kind index_scoring --rows 8 --pos 524287 --workload W1 \
    --versus $OLD --also ix_score.warm_first=4 --also launch.k_splits=48 --rounds 1; pack
OUT=$LOGS step vs_128k 70 $TL --kind index_scoring --rows 8 --pos 131071 --workload W2 \
    --versus $OLD --also ix_score.tails_last=1 --rounds 2; pack
same_digests check 60 index_scoring 8 $OLD
OUT=$LOGS step topk 45 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1 --backend cuda; pack
OUT=$LOGS step tl_new 40 $TL --kind index_scoring --rows 8 --pos 131071 --workload W1 \
    --timeline --jobs-csv $LOGS/jobs_128k_w1.csv; pack
else
OLD=ix_score.query_records=0
same_digests check 120 index_scoring 2,4,8 $OLD
OUT=$LOGS step vs_r8 240 $TL --kind index_scoring --rows 8 --pos 131071,524287 \
    --workload W1,W2 --versus $OLD --also ix_score.warm_first=4 --also launch.k_splits=48 \
    --also ix_score.tails_last=1 --rounds 2; pack
OUT=$LOGS step vs_r42 150 $TL --kind index_scoring --rows 4,2 --pos 131071,524287 \
    --workload W2 --versus $OLD --rounds 2; pack
OUT=$LOGS step vs_index 120 $TL --kind index --rows 8 --pos 524287 --workload W1,W2 \
    --versus $OLD --rounds 2; pack
OUT=$LOGS step topk 100 python3 -m tools.check_topk --through index --config glm5 \
    --pos 131071,524287 --rows 8 --workload W1,W2 --backend cuda; pack
OUT=$LOGS step tl_new 60 $TL --kind index_scoring --rows 8 --pos 131071 --workload W1 \
    --timeline; pack
fi
rm -rf "$LOGS"
