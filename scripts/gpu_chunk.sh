#!/bin/bash
# One chunk of a GPU reproduction queue item on a lent GPU machine (docs/results.md, "GPU work in chunks").
#
#   bash scripts/gpu_chunk.sh WINDOW_S OUT RECIPES SEEDS [selfcheck] [perf]
#   e.g. bash scripts/gpu_chunk.sh 560 peptides-func gcn-geanet-peptides-func 0,1,2,3 selfcheck
#
# Run in the checkout on the GPU machine, carrying .whl (the wheels that machine lacks) and gpu-carry (the mirror of
# the raw data and gpu-carry/runs/OUT, the bench folder). It installs the wheels; runs `gea-graph selfcheck --device
# cuda` when asked (the first chunk of a session) and `gea-graph perf --quick --device cuda` when asked (the CUDA
# ratios of docs/performance.md); prepares each recipe's data; trains the bench (all its runs at once) until
# WINDOW_S seconds from the start, less a margin for the last epoch and the packing; and packs into $OUT the
# environment, selfcheck and perf (check.tgz), the bench files (bench.tgz) and one archive per run. Each returned
# file must stay under 16 MiB and 8 come back at most, so a bench of more than 6 runs goes in several benches.
set -o pipefail
export PYTHONUNBUFFERED=1
WINDOW=$1 BENCH=$2 RECIPES=$3 SEEDS=$4
[ -n "$SEEDS" ] || { echo "usage: $0 WINDOW_S OUT RECIPES SEEDS [selfcheck] [perf]" >&2; exit 2; }
EXTRAS=" ${*:5} "
START=$SECONDS
SCRATCH=$(mktemp -d)  # wheels, the gea-graph launcher, the data root and the checks: nothing in the checkout
# the machine's image has torch, PyG and Lightning but neither RDKit nor OGB: the carried wheels, no dependencies
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SCRATCH/site .whl/*.whl \
    || exit 9
export PYTHONPATH=$SCRATCH/site:$PWD PYTHONWARNINGS="ignore::UserWarning:outdated"
mkdir -p $SCRATCH/bin && printf '#!/bin/sh\nexec python3 -m gea_graph "$@"\n' > $SCRATCH/bin/gea-graph
chmod +x $SCRATCH/bin/gea-graph
export PATH=$SCRATCH/bin:$PATH
nvidia-smi -L; uptime
mkdir -p $SCRATCH/check
python3 -c "import torch, torch_geometric, lightning, rdkit, ogb; print('torch', torch.__version__, '| PyG',
torch_geometric.__version__, '| Lightning', lightning.__version__, '| RDKit', rdkit.__version__, '|',
torch.cuda.get_device_name(0))" 2>&1 | tee $SCRATCH/check/env.txt
export GEA_GRAPH_MIRROR=$PWD/gpu-carry/mirror GEA_GRAPH_DATA=$SCRATCH/gpu-data/datasets
if [[ $EXTRAS == *" selfcheck "* ]]; then
  timeout 240 gea-graph selfcheck --device cuda --json $SCRATCH/check/selfcheck.json 2>&1 \
      | tee $SCRATCH/check/selfcheck.log | grep -v '^\[selfcheck\]'
  echo "selfcheck: exit ${PIPESTATUS[0]} after $((SECONDS - START)) s"
fi
if [[ $EXTRAS == *" perf "* ]]; then
  timeout 240 gea-graph perf --quick --device cuda --out $SCRATCH/check/perf 2>&1 | grep '^| ' | cut -c1-150
  echo "perf: exit ${PIPESTATUS[0]} after $((SECONDS - START)) s"
fi
tar czf $OUT/check.tgz -C $SCRATCH/check .
for recipe in ${RECIPES//,/ }; do
  read -r name pe < <(python3 -c "from gea_graph.train import load_recipe; d = load_recipe('$recipe').data; \
print(d.name, d.pe or '')")
  gea-graph data prepare "$name" ${pe:+--pe "$pe"} 2>&1 | tail -1
done
echo "data ready after $((SECONDS - START)) s"
LEFT=$((WINDOW - (SECONDS - START)))
STOP=$(( (LEFT - 75) / 60 ))  # whole minutes; 75 s for the epoch in flight, the checkpoints and the packing
[ $STOP -ge 1 ] || { echo "no time left for the bench (${LEFT} s)"; exit 4; }
mkdir -p gpu-carry/runs/$BENCH
JOBS=$(( $(echo ${RECIPES//,/ } | wc -w) * $(echo ${SEEDS//,/ } | wc -w) ))
timeout $((LEFT - 20)) gea-graph bench --recipes $RECIPES --seeds $SEEDS --jobs $JOBS --threads 3 \
    --out gpu-carry/runs/$BENCH --stop-after $STOP 2>&1 | grep -v Warning | tail -8
echo "bench: exit ${PIPESTATUS[0]} after $((SECONDS - START)) s"
cd gpu-carry/runs/$BENCH || exit 5
tar czf $OUT/bench.tgz bench.json results.* curves.png 2>/dev/null
for run in */seed*; do tar czf "$OUT/$(echo $run | tr / -).tgz" "$run"; done
for run in */seed*; do echo "$run: last epoch $(tail -n 1 $run/metrics.csv | cut -d, -f1-4)"; done
