#!/usr/bin/env bash
# A batch file as N shards on Slurm (docs/batch-shards.md): a job array, one shard per task, then a merge job.
# Submit from a directory on a file system every node sees (after mkdir shards, for the logs):
#   jid=$(sbatch --parsable slurm-batch-shards.sh)
#   sbatch --dependency=afterok:$jid --wrap 'sluice batch --merge -i requests.jsonl -o results.jsonl shards/*/results.jsonl'
# Change --array with N (0-7 is 8 shards), and MODEL_DIR, INPUT and the resources for your cluster.
#SBATCH --job-name=sluice-batch
#SBATCH --array=0-7
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=32
#SBATCH --mem=0
#SBATCH --time=12:00:00
#SBATCH --requeue
#SBATCH --signal=B:TERM@120
#SBATCH --output=shards/slurm-%A_%a.log
set -euo pipefail

MODEL_DIR=${MODEL_DIR:-models/kimi-k2}
INPUT=${INPUT:-requests.jsonl}
I=$SLURM_ARRAY_TASK_ID
N=$SLURM_ARRAY_TASK_COUNT

# SIGTERM (the time limit's warning above, or preemption) makes sluice cancel what runs and exit 130; its results
# so far are kept, and a requeued task resumes from them: the same command skips the custom_ids already answered.
exec sluice batch -m "$MODEL_DIR" --parallel 32 --shard "$I/$N" -i "$INPUT" -o "shards/$I/results.jsonl"
