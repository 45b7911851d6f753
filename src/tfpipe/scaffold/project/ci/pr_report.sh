#!/usr/bin/env bash
# __PROJECT__'s report on a pull (merge) request, as .github/workflows/tfpipe.yml and .gitlab-ci.yml run it:
#   bash ci/pr_report.sh BASE_COMMIT CHANGE_COMMIT
# Each commit is checked out in a git worktree of its own (.tfpipe-ci/base, .tfpipe-ci/change), trained there on a
# small preset (`python -m tfpipe run-all`: prepare, train, evaluate) into one MLflow store, and `tfpipe report`
# compares the change's runs (group B) with the base's (group A). It writes, in the folder it is run from:
#   reports/pr/             report.md, report.html and the pictures (also logged into the base run, report/)
#   reports/pr-comment.md   what CI posts on the request: one line saying what ran, then report.md (its pictures
#                           named: a comment cannot show a file)
# Both commits train in the environment installed before (this checkout's requirements.lock): the report measures
# the change's code, config and data, not a change of the lock. The two worktrees differ in the absolute paths
# that data.* records, so the two commits are two groups even when only code differs (params are the same).
# Settings (environment; CI variables):
#   TFPIPE_CI_OVERRIDES   Hydra overrides of both trainings (default experiment=smoke: 256 examples a split, 1 epoch)
#   TFPIPE_CI_SEEDS       e.g. "1 2 3": one run a side per seed (train.seed), which lets the report test the
#                         difference (Welch); unset: one run a side, the config's own seed
#   MLFLOW_TRACKING_URI   the store (a team server keeps runs and reports); unset: .tfpipe-ci/mlflow.db, local
# Data: a worktree whose commit tracks data/raw/*.dvc pulls them (`dvc pull`, the remote of .dvc/config, its
# credentials from the environment); with none, prepare downloads a built-in dataset with TensorFlow Datasets.
set -euo pipefail

# The whole script is read before it runs (main, then exit on the same line): nothing here is re-read later.
main() {
  if [ "$#" -ne 2 ] || [ -z "$1" ] || [ -z "$2" ]; then
    echo "usage: bash ci/pr_report.sh BASE_COMMIT CHANGE_COMMIT (both commits of this repository)" >&2
    return 2
  fi
  local base change overrides seeds work
  base=$(git rev-parse --verify --quiet "$1^{commit}") || { echo "ci/pr_report.sh: $1: not a commit here (fetch the whole history: fetch-depth 0, GIT_DEPTH 0)" >&2; return 2; }
  change=$(git rev-parse --verify --quiet "$2^{commit}") || { echo "ci/pr_report.sh: $2: not a commit here" >&2; return 2; }
  overrides=${TFPIPE_CI_OVERRIDES:-experiment=smoke}
  seeds=${TFPIPE_CI_SEEDS:-}
  work="$PWD/.tfpipe-ci"
  for side in base change; do
    git worktree remove --force "$work/$side" 2>/dev/null || true
  done
  git worktree prune
  rm -rf "$work" reports/pr reports/pr-comment.md
  mkdir -p "$work" reports
  export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-sqlite:///$work/mlflow.db}"
  export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false

  train base "$base" > "$work/base.runs"  # a plain command: a failed step stops the script (set -e)
  train change "$change" > "$work/change.runs"
  local -a base_runs change_runs
  mapfile -t base_runs < "$work/base.runs"
  mapfile -t change_runs < "$work/change.runs"

  python -m tfpipe report "${base_runs[@]}" "${change_runs[@]}" --out reports/pr --log
  {
    echo "**tfpipe report**: base \`${base:0:8}\` (group A) against this change \`${change:0:8}\` (group B)," \
      "each trained here with \`python -m tfpipe run-all $overrides\`, ${#change_runs[@]} run(s) a side." \
      "The pictures and report.html are in the job's artifacts (reports/)."
    echo
    # a picture is a file beside report.md, not something a comment can show: named, as the artifact it is
    sed -E "s|^!\[(.*)\]\((.*)\)\$|*\1*: reports/pr/\2 in the job's artifacts|" reports/pr/report.md
  } > reports/pr-comment.md
  echo "ci/pr_report.sh: reports/pr-comment.md (runs: base ${base_runs[*]}, change ${change_runs[*]})"
}

# train SIDE COMMIT: the commit in worktree .tfpipe-ci/SIDE, its data, one run per seed; prints the run ids.
# A subshell (the parentheses): its `cd` stays inside, and set -e stops it at the first failed step.
train() (
  local side=$1 commit=$2 tree="$work/$1" seed tracked
  echo "ci/pr_report.sh: training $side ($commit) in $tree" >&2
  git worktree add --quiet --detach "$tree" "$commit"
  cd "$tree"
  tracked=$(git ls-files 'data/raw/*.dvc')
  if [ -n "$tracked" ]; then
    # shellcheck disable=SC2086  # git's paths: data/raw/<dataset>.dvc, no spaces (the dataset names)
    python -m dvc pull --quiet $tracked >&2
  fi
  for seed in ${seeds:-default}; do
    rm -rf models metrics plots run.json .tfpipe  # each run starts clean; data/prepared is reused when it fits
    local -a extra=()
    [ "$seed" = default ] || extra=("train.seed=$seed")
    # shellcheck disable=SC2086  # the overrides are words, as on a command line
    python -m tfpipe run-all $overrides "tracking.artifact_location=$work/mlartifacts" "${extra[@]}" >&2
    python -c 'import json, sys; print(json.load(open(sys.argv[1]))["run_id"])' run.json
  done
)

main "$@"; exit
