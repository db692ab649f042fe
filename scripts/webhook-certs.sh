#!/usr/bin/env bash
# Makes a CA and a serving certificate for the webhook Service's DNS names,
# writes the TLS Secret and the MutatingWebhookConfiguration with its caBundle
# filled in, and applies both with kubectl (unless --dry-run).
#
#   scripts/webhook-certs.sh [--namespace NS] [--service NAME] [--secret NAME]
#                            [--days N] [--output-dir DIR] [--dry-run]
#
# --dry-run only writes the files (into --output-dir, default ./webhook-certs)
# and needs no cluster. Without --output-dir a real run works in a temporary
# directory that is removed afterwards, so the CA key is not left behind.
set -euo pipefail

prog=$(basename "$0")
repo=$(cd "$(dirname "$0")/.." && pwd)
template="$repo/webhook/deploy/mutatingwebhookconfiguration.yaml"

namespace=cri-resmgr
service=cri-resmgr-webhook
secret=cri-resmgr-webhook-tls
days=365
out=""
dry_run=0

die() { echo "$prog: error: $*" >&2; exit 2; }
need_value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --namespace) need_value "$@"; namespace=$2; shift 2 ;;
    --service) need_value "$@"; service=$2; shift 2 ;;
    --secret) need_value "$@"; secret=$2; shift 2 ;;
    --days) need_value "$@"; days=$2; shift 2 ;;
    --output-dir) need_value "$@"; out=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# Kubernetes names: DNS-1123 labels; anything else would make a broken SAN.
for v in "$namespace" "$service" "$secret"; do
  [[ "$v" =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] || die "'$v' is not a valid Kubernetes name"
done
[[ "$days" =~ ^[1-9][0-9]*$ ]] || die "--days must be a positive integer, got '$days'"
command -v openssl >/dev/null || die "openssl not found (apt-get install openssl)"
[ -r "$template" ] || die "cannot read $template"
if [ "$dry_run" = 0 ]; then
  command -v kubectl >/dev/null || die "kubectl not found (or use --dry-run)"
fi

cleanup=""
if [ -z "$out" ]; then
  if [ "$dry_run" = 1 ]; then
    out=./webhook-certs
  else
    out=$(mktemp -d)
    cleanup=$out
  fi
fi
trap '[ -z "$cleanup" ] || rm -rf "$cleanup"' EXIT
mkdir -p "$out"
umask 077

fqdn="$service.$namespace.svc"
cat >"$out/server-ext.cnf" <<CNF
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
subjectAltName = DNS:$service, DNS:$service.$namespace, DNS:$fqdn, DNS:$fqdn.cluster.local
CNF

# openssl chatters on stderr even when it succeeds: show it only on failure.
ossl() {
  local err
  err=$(openssl "$@" 2>&1 >/dev/null) || die "openssl $1 failed: $err"
}
ossl req -x509 -new -nodes -days "$days" \
  -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -keyout "$out/ca.key" -out "$out/ca.crt" -subj "/CN=$service CA" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign"
ossl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -keyout "$out/tls.key" -out "$out/tls.csr" -subj "/CN=$fqdn"
ossl x509 -req -in "$out/tls.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
  -CAcreateserial -days "$days" -extfile "$out/server-ext.cnf" -out "$out/tls.crt"
openssl verify -CAfile "$out/ca.crt" -purpose sslserver "$out/tls.crt" >/dev/null \
  || die "the serving certificate does not verify against the new CA"
rm -f "$out/tls.csr" "$out/ca.srl" "$out/server-ext.cnf"

b64() { base64 -w0 <"$1"; }
cat >"$out/secret.yaml" <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: $secret
  namespace: $namespace
  labels:
    app.kubernetes.io/name: cri-resmgr-webhook
    app.kubernetes.io/part-of: cri-resmgr
type: kubernetes.io/tls
data:
  tls.crt: $(b64 "$out/tls.crt")
  tls.key: $(b64 "$out/tls.key")
YAML

# Fills caBundle and points clientConfig.service at the Service named above.
ca_bundle=$(b64 "$out/ca.crt")
sed -e "s|^\( *caBundle:\).*|\1 \"$ca_bundle\"|" \
    -e "/^ *service:/,/^ *port:/{s|^\( *name:\).*|\1 $service|;s|^\( *namespace:\).*|\1 $namespace|}" \
    "$template" >"$out/mutatingwebhookconfiguration.yaml"
grep -q "caBundle: \"$ca_bundle\"" "$out/mutatingwebhookconfiguration.yaml" \
  || die "could not fill caBundle in $template"

if [ "$dry_run" = 1 ]; then
  echo "$prog: wrote ca.crt ca.key tls.crt tls.key secret.yaml mutatingwebhookconfiguration.yaml to $out"
  exit 0
fi
kubectl apply -f "$out/secret.yaml"
kubectl apply -f "$out/mutatingwebhookconfiguration.yaml"
echo "$prog: Secret $namespace/$secret and MutatingWebhookConfiguration applied for $fqdn"
