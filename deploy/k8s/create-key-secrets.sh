#!/usr/bin/env sh
# Creates the key Secrets the manifests here read, each from a fresh `hbidx keys new`, so no
# example key ever reaches a cluster: run it once per namespace, before `kubectl apply`.
#
#   deploy/k8s/create-key-secrets.sh            # the sidecar layout (deploy/k8s/)
#   deploy/k8s/create-key-secrets.sh --cluster  # the sharded tier (deploy/k8s/cluster/) as well
#
# Secrets:
#   hbidx-operator-key    HBIDX_API_KEY of the hbidx containers: lookup, write and admin
#                         (audit id "cli"); the operator reads it back with
#                         kubectl get secret hbidx-operator-key -o jsonpath='{.data.key}' | base64 -d
#   hbidx-prometheus-key  Prometheus's key (admin scope only; prometheus-scrape.yaml)
#   hbidx-cursor-key      HBIDX_CURSOR_KEY of the sidecars, which seal paging cursors with it,
#                         so that a client pages through whichever replica the Service picks
#                         (not an API key: it opens no route)
#   hbidx-cluster-key     --cluster: HBIDX_CLUSTER_KEY, the key the tier's pods call each
#                         other's internal routes with (the cluster scope only)
#
# The Prometheus key is known to hbidx by its hash only: the script prints its [[security.keys]]
# entry, to be put into hbidx-config.yaml (or cluster/hbidx-cluster-config.yaml) in place of the
# "prometheus" entry there. HBIDX and KUBECTL name other binaries (e.g. KUBECTL="kubectl -n
# search"). An existing Secret is left as it is (kubectl refuses to create it again); delete
# it first to rotate.
set -eu
HBIDX=${HBIDX:-hbidx}
KUBECTL=${KUBECTL:-kubectl}

# secret NAME ID SCOPE: creates Secret NAME with `key`, a fresh key; prints the config entry.
secret() {
  out=$("$HBIDX" keys new --id "$2" --scope "$3")
  key=$(printf '%s\n' "$out" | sed -n 2p)
  $KUBECTL create secret generic "$1" --from-literal=key="$key"
  $KUBECTL label secret "$1" app.kubernetes.io/name=hbidx >/dev/null
  printf '%s\n' "$out" | sed -n '/^\[\[security.keys\]\]/,$p'
}

secret hbidx-operator-key cli admin >/dev/null
echo "# the Prometheus key's entry for the config's [security]:" >&2
secret hbidx-prometheus-key prometheus admin
secret hbidx-cursor-key cursor lookup >/dev/null
if [ "${1:-}" = --cluster ]; then
  secret hbidx-cluster-key cluster cluster >/dev/null
fi
