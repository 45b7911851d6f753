#!/usr/bin/env bash
# The team MLflow tracking server: PostgreSQL backend store, proxied artifact store, basic auth.
#
# Everything comes from the environment; no secret is written to a file by this script.
#   MLFLOW_BACKEND_STORE_URI     required  postgresql://mlflow@db.example:5432/mlflow?sslmode=verify-full  (runs,
#                                params, metrics; handed to `mlflow server` in its environment, not argv: `ps` shows argv)
#   MLFLOW_AUTH_DATABASE_URI     required  postgresql://mlflow@db.example:5432/mlflow_auth?sslmode=verify-full
#                                (users, permissions). A URI carrying a password is refused; a database on another
#                                host needs sslmode= in the URI (or PGSSLMODE): verify-full (+ sslrootcert=) checks
#                                the server's certificate and name, require only encrypts, disable sends plaintext.
#   MLFLOW_AUTH_ADMIN_PASSWORD   required  the admin's password (>= 12 characters; MLflow ships no default)
#   PGPASSWORD / PGPASSFILE      the database password for libpq (or ~/.pgpass, mode 0600) - never in the URIs
#   MLFLOW_AUTH_ADMIN_USERNAME   default admin
#   MLFLOW_ARTIFACTS_DESTINATION default ./mlflow-artifacts (a local folder); s3://bucket/prefix for S3 or
#                                an S3-compatible store (MinIO, Ceph: also set MLFLOW_S3_ENDPOINT_URL,
#                                AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY on the server; clients need none)
#   MLFLOW_DEFAULT_PERMISSION    default READ: every signed-in user reads every run and logs only into the
#                                experiments the admin granted EDIT on (README); EDIT would let anyone change
#                                anyone's runs, artifacts and tags
#   MLFLOW_HOST / MLFLOW_PORT    default 127.0.0.1 / 5000: serve the team through the TLS front of
#                                deploy/mlflow/Caddyfile (443 -> 127.0.0.1:5000); 0.0.0.0 would send the team's
#                                passwords over plain HTTP
#   MLFLOW_WORKERS               default 2
#   MLFLOW_FLASK_SERVER_SECRET_KEY  signs CSRF tokens; default: random per start
# Extra arguments go to `mlflow server` (e.g. --allowed-hosts mlflow.example.org behind the TLS front).
#
# Clients authenticate with MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (see README, "Working as a team").
set -euo pipefail

die() { echo "mlflow-server: error: $*" >&2; exit 2; }
[[ -n "${MLFLOW_BACKEND_STORE_URI:-}" ]] || die "set MLFLOW_BACKEND_STORE_URI (postgresql://user@host:5432/mlflow)"
[[ -n "${MLFLOW_AUTH_DATABASE_URI:-}" ]] || die "set MLFLOW_AUTH_DATABASE_URI (postgresql://user@host:5432/mlflow_auth)"
[[ -n "${MLFLOW_AUTH_ADMIN_PASSWORD:-}" ]] || die "set MLFLOW_AUTH_ADMIN_PASSWORD (the admin password, at least 12 characters)"
[[ "${MLFLOW_AUTH_ADMIN_PASSWORD}" != "password1234" ]] || die "MLFLOW_AUTH_ADMIN_PASSWORD is MLflow's old public default; choose another"
(( ${#MLFLOW_AUTH_ADMIN_PASSWORD} >= 12 )) || die "MLFLOW_AUTH_ADMIN_PASSWORD is shorter than 12 characters"
# A password inside a URI ends up in logs, shell history and error messages; libpq reads it from elsewhere.
no_password() {
  if [[ "${!1}" =~ ^[^:/?#]+://[^/?#@]*:[^/?#@]*@ || "${!1}" =~ [?\&]password= ]]; then
    die "$1 carries a password; remove it from the URI and give it to libpq in PGPASSFILE, ~/.pgpass or PGPASSWORD"
  fi
}
# The host of a URI ('' for a Unix socket); a database on another machine must choose its TLS mode explicitly.
db_host() { sed -E 's#^[^:/?]+://([^@/?]*@)?(\[[^]/]*\]|[^:/?]*).*#\2#' <<<"$1"; }
tls_mode() {
  [[ "${!1}" =~ ^postgres ]] || return 0
  local host; host="$(db_host "${!1}")"
  case "$host" in ""|localhost|127.*|"[::1]") return 0 ;; esac
  [[ "${!1}" =~ [?\&]sslmode= || -n "${PGSSLMODE:-}" ]] || die "$1: database host $host is another machine; add ?sslmode=verify-full&sslrootcert=/path/to/ca.crt to the URI (sslmode=require only encrypts, sslmode=disable sends plaintext)"
}
for uri in MLFLOW_BACKEND_STORE_URI MLFLOW_AUTH_DATABASE_URI; do no_password "$uri"; tls_mode "$uri"; done
permission="${MLFLOW_DEFAULT_PERMISSION:-READ}"
case "$permission" in READ|USE|EDIT|MANAGE|NO_PERMISSIONS) ;; *) die "MLFLOW_DEFAULT_PERMISSION=$permission: use READ, USE, EDIT, MANAGE or NO_PERMISSIONS" ;; esac
# Signs the auth app's CSRF tokens; must be equal across workers (and servers behind one name).
# Not given: a fresh random key per start (signed-in browser sessions end with a restart).
export MLFLOW_FLASK_SERVER_SECRET_KEY="${MLFLOW_FLASK_SERVER_SECRET_KEY:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
export MLFLOW_AUTH_ADMIN_USERNAME="${MLFLOW_AUTH_ADMIN_USERNAME:-admin}"
# MLflow's job runner (huey consumers for GenAI scorers and trace roll-ups) starts 4+ processes a training team
# never uses; MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true turns it back on.
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"
# SQLAlchemy 2.1 maps plain postgresql:// to psycopg 3; the pinned driver is psycopg2 (psycopg2-binary).
psycopg2() { sed -E 's#^postgres(ql)?://#postgresql+psycopg2://#' <<<"$1"; }
export MLFLOW_BACKEND_STORE_URI="$(psycopg2 "$MLFLOW_BACKEND_STORE_URI")"   # mlflow server reads it from here
MLFLOW_AUTH_DATABASE_URI="$(psycopg2 "$MLFLOW_AUTH_DATABASE_URI")"
artifacts="${MLFLOW_ARTIFACTS_DESTINATION:-./mlflow-artifacts}"
if [[ "$artifacts" != *://* ]]; then mkdir -p "$artifacts"; artifacts="$(cd "$artifacts" && pwd)"; fi

# MLflow's auth app reads its settings from an ini file (MLFLOW_AUTH_CONFIG_PATH). It holds no secret:
# the admin password stays in MLFLOW_AUTH_ADMIN_PASSWORD, the database password in PGPASSWORD.
config_dir="$(mktemp -d "${TMPDIR:-/tmp}/mlflow-auth.XXXXXX")"
trap 'rm -rf "$config_dir"' EXIT
cat > "$config_dir/basic_auth.ini" <<INI
[mlflow]
default_permission = $permission
database_uri = ${MLFLOW_AUTH_DATABASE_URI//%/%%}
admin_username = $MLFLOW_AUTH_ADMIN_USERNAME
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
INI
export MLFLOW_AUTH_CONFIG_PATH="$config_dir/basic_auth.ini"

shown_store="$(sed -E 's#(://[^:/@]*):[^@/]*@#\1:***@#' <<<"$MLFLOW_BACKEND_STORE_URI")"
echo "mlflow-server: http://${MLFLOW_HOST:-127.0.0.1}:${MLFLOW_PORT:-5000} store=$shown_store artifacts=$artifacts" >&2
mlflow server --app-name basic-auth \
  --artifacts-destination "$artifacts" --serve-artifacts \
  --host "${MLFLOW_HOST:-127.0.0.1}" --port "${MLFLOW_PORT:-5000}" --workers "${MLFLOW_WORKERS:-2}" \
  "$@" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null; wait "$server"; rm -rf "$config_dir"' TERM INT
wait "$server"
