#!/bin/bash
# One chunk of GPU work on a lent GPU machine, at most 9 minutes (docs/results.md, "GPU work in chunks"):
#   1. `gea-graph selfcheck --device cuda` (the "captured step = eager" check among them),
#   2. the CUDA perf rows of issue 47 (`gea-graph perf --quick --device cuda --only gpu`; their datasets are
#      prepared before, each row is saved as soon as it is measured),
#   3. the next chunk of a GPU queue item, trained with the fast step (trainer.compile=reduce-overhead, which pads
#      every batch to a fixed shape: trainer.fixed_size auto).
#
#   bash scripts/gpu_chunk.sh WINDOW_S BENCH RECIPES SEEDS [selfcheck] [perf]
#   e.g. bash scripts/gpu_chunk.sh 540 peptides-func gcn-geanet-peptides-func 0,1,2,3 selfcheck perf
#
# The queue's resumable state lives in git: docs/results/gpu/queue/BENCH (the bench folder: bench.json, every run's
# recipe, metrics and last.ckpt; no best.ckpt). It travels to the GPU machine with the checkout (a tracked folder)
# and is never written there: the chunk trains a scratch copy and returns it in $OUT (bench.tgz and one archive per
# run, each < 16 MiB). Back on the development machine, any machine with a clone:
#   mkdir -p docs/results/gpu/queue/BENCH; for f in FILES_AT/bench.tgz FILES_AT/*-seed*.tgz; do
#       tar xzf $f -C docs/results/gpu/queue/BENCH; done
#   find docs/results/gpu/queue/BENCH -name best.ckpt -delete; git add docs/results/gpu/queue/BENCH; git commit
# so the next chunk, from any machine, goes on where this one stopped. Carry .whl (RDKit/OGB wheels) and
# gpu-carry/mirror (raw data; docs/results.md, "GPU work in chunks", says how to make both).
set -o pipefail
export PYTHONUNBUFFERED=1
WINDOW=$1 BENCH=$2 RECIPES=$3 SEEDS=$4
[ -n "$SEEDS" ] || { echo "usage: $0 WINDOW_S BENCH RECIPES SEEDS [selfcheck] [perf]" >&2; exit 2; }
[ "$WINDOW" -le 540 ] || { echo "a chunk is at most 9 minutes (540 s)" >&2; exit 2; }
EXTRAS=" ${*:5} "
START=$SECONDS
STATE=$PWD/docs/results/gpu/queue/$BENCH
SCRATCH=$(mktemp -d)  # wheels, the launcher, the data root, the checks and the bench copy: nothing in the checkout
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SCRATCH/site .whl/*.whl \
    || exit 9
export PYTHONPATH=$SCRATCH/site:$PWD PYTHONWARNINGS="ignore::UserWarning:outdated"
mkdir -p $SCRATCH/bin && printf '#!/bin/sh\nexec python3 -m gea_graph "$@"\n' > $SCRATCH/bin/gea-graph
chmod +x $SCRATCH/bin/gea-graph
export PATH=$SCRATCH/bin:$PATH
nvidia-smi -L; uptime; git log -1 --format='commit %h' 2>/dev/null
mkdir -p $SCRATCH/check
python3 -c "import torch, torch_geometric, lightning, rdkit, ogb; print('torch', torch.__version__, '| PyG',
torch_geometric.__version__, '| Lightning', lightning.__version__, '| RDKit', rdkit.__version__, '|',
torch.cuda.get_device_name(0))" 2>&1 | tee $SCRATCH/check/env.txt
export GEA_GRAPH_MIRROR=$PWD/gpu-carry/mirror GEA_GRAPH_DATA=$SCRATCH/gpu-data/datasets
# The data first: the queue's and, with perf, that of the CUDA rows' recipes (so no row builds a dataset on its clock)
PREPARE=${RECIPES//,/ }
[[ $EXTRAS == *" perf "* ]] && PREPARE="$PREPARE geaet-zinc pyg-gps-zinc gcn-geanet-peptides-func"
python3 -c "import sys; from gea_graph.train import load_recipe
for d in sorted({(r.data.name, r.data.pe or '') for r in map(load_recipe, sys.argv[1:])}): print(*d)" $PREPARE |
while read -r name pe; do
  gea-graph data prepare "$name" ${pe:+--pe "$pe"} 2>&1 | tail -1
done
echo "data ready after $((SECONDS - START)) s"
if [[ $EXTRAS == *" selfcheck "* ]]; then
  timeout 150 gea-graph selfcheck --device cuda --json $SCRATCH/check/selfcheck.json 2>&1 \
      | tee $SCRATCH/check/selfcheck.log | grep -v '^\[selfcheck\]'
  echo "selfcheck: exit ${PIPESTATUS[0]} after $((SECONDS - START)) s"
fi
if [[ $EXTRAS == *" perf "* ]]; then
  # perf.json is rewritten after every row: a timeout keeps the rows measured before it
  timeout 300 gea-graph perf --quick --device cuda --only gpu --out $SCRATCH/check/perf 2>&1 | grep '^| ' | cut -c1-200
  echo "perf: exit ${PIPESTATUS[0]} after $((SECONDS - START)) s"
fi
tar czf $OUT/check.tgz -C $SCRATCH/check .
LEFT=$((WINDOW - (SECONDS - START)))
STOP=$(( (LEFT - 75) / 60 ))  # whole minutes; 75 s for the epoch in flight, the checkpoints and the packing
[ $STOP -ge 1 ] || { echo "no time left for the bench (${LEFT} s)"; exit 4; }
RUNS=$SCRATCH/runs/$BENCH
mkdir -p $RUNS && { [ -d "$STATE" ] && cp -r $STATE/. $RUNS/; true; }
JOBS=$(( $(echo ${RECIPES//,/ } | wc -w) * $(echo ${SEEDS//,/ } | wc -w) ))
timeout $((LEFT - 20)) gea-graph bench --recipes $RECIPES --seeds $SEEDS --jobs $JOBS --threads 3 \
    --set trainer.compile=reduce-overhead --out $RUNS --stop-after $STOP 2>&1 | grep -v Warning | tail -8
echo "bench: exit ${PIPESTATUS[0]} after $((SECONDS - START)) s"
# A run is saved only at an epoch end: a first epoch (compiling included) longer than the window leaves nothing
[ -n "$(find $RUNS -name last.ckpt -print -quit)" ] || echo "no run saved a checkpoint: no epoch ended within" \
    "the bench's $((LEFT - 20)) s, so the queue's state did not move; give the bench a whole chunk (no selfcheck," \
    "no perf)"
cd $RUNS || exit 5
tar czf $OUT/bench.tgz bench.json results.* curves.png 2>/dev/null
for run in */seed*; do tar czf "$OUT/$(echo $run | tr / -).tgz" "$run"; done
ls -la $OUT; echo "chunk done after $((SECONDS - START)) s"
