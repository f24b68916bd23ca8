#!/usr/bin/env bash
# A one-node Kubernetes cluster for the k8s test layer, on this machine: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and a kubelet on containerd, built from the Kubernetes Go modules by
# scripts/k8s-build.sh, with a simulated NVIDIA device plugin that gives the node 4 `nvidia.com/gpu`.
#
#   scripts/k8s-setup.sh [start]   install packages, build (cached), start everything, wait until the node is
#                                  Ready with its GPUs; idempotent: a running cluster is left alone
#   scripts/k8s-setup.sh stop      stop every process, remove the pods' containers, the bridge and the state
#   scripts/k8s-setup.sh status    say what runs
#
# What it makes (docs/kubernetes.md, "The test cluster"):
#   * certificates and service-account keys made here with openssl, under $K8S_DIR/pki; the admin's kubeconfig
#     is $K8S_DIR/admin.kubeconfig (the tests' KUBECONFIG);
#   * etcd on 127.0.0.1:23790, the API server on https://127.0.0.1:16443;
#   * a bridge jhgpu-k8s0 with the explicit subnet $K8S_SUBNET (default 10.214.0.0/24): the node's IP is its
#     gateway (.1) and pods get addresses on it from the CNI bridge plugin; nothing routes anywhere else (no
#     masquerade), so test traffic stays between this machine and its own pods;
#   * the stand-in NVIDIA driver in $K8S_NVML_ROOT (scripts/nvml-sim-setup.sh): the device plugin advertises
#     its GPUs and mounts its library, state and device nodes into each GPU pod, so pods read NVML;
#   * the node `jhgpu-sim-node`, labelled nvidia.com/gpu.product=Simulated-T4 and tainted nvidia.com/gpu:NoSchedule
#     as the values file expects, with 4 simulated `nvidia.com/gpu` (IDs GPU-sim-0..3) from
#     gpu-device-plugin-sim, which speaks the kubelet's device-plugin API;
#   * a StorageClass `jhgpu-local` and 16 hostPath PersistentVolumes under $K8S_DIR/volumes, so users' PVCs bind;
#   * Kueue's manager (scripts/kueue-build.sh, tools/kueue) as a process of the machine in a chroot of its own,
#     $K8S_DIR/kueue-root: its CRDs, RBAC and webhooks from the Kueue module (scripts/kueue-apply.py), the
#     webhooks by URL (https://127.0.0.1:$KUEUE_WEBHOOK_PORT), its visibility API through the API server's
#     aggregation layer (front-proxy certificates, --enable-aggregator-routing);
#   * the CPU TensorFlow single-user image (make tf-test-image) and the hub image of config/kubernetes/hub.Dockerfile
#     (make k8s-hub-image) imported into containerd from Docker, and a pause image made from our own pause
#     binary (there is no registry).
#
# Environment: K8S_DIR (default /var/lib/jhgpu-k8s), K8S_SUBNET (default 10.214.0.0/24), K8S_GPUS (4),
#   K8S_IMAGE (jupyterhub-gpu/tensorflow:2.15-cpu), K8S_HUB_IMAGE (jupyterhub-gpu/k8s-hub:test), K8S_WAIT_S (120).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
K8S_DIR="${K8S_DIR:-/var/lib/jhgpu-k8s}"
RUN_DIR="${K8S_RUN_DIR:-/run/jhgpu-k8s}"
K8S_SUBNET="${K8S_SUBNET:-10.214.0.0/24}"
K8S_GPUS="${K8S_GPUS:-4}"
# the stand-in NVIDIA driver of the node (scripts/nvml-sim-setup.sh): its own root, apart from the Docker
# engine's, whose state the Docker tests rewrite
K8S_NVML_ROOT="${K8S_NVML_ROOT:-/var/lib/jupyterhub-gpu-sim-k8s}"
K8S_WAIT_S="${K8S_WAIT_S:-120}"
K8S_IMAGE="${K8S_IMAGE:-jupyterhub-gpu/tensorflow:2.15-cpu}"
K8S_HUB_IMAGE="${K8S_HUB_IMAGE:-jupyterhub-gpu/k8s-hub:test}"
PAUSE_IMAGE="localhost/jhgpu-pause:sim"  # our own pause binary; never mistaken for registry.k8s.io's
NODE=jhgpu-sim-node
BRIDGE=jhgpu-k8s0
PREFIX=${K8S_SUBNET%.*}  # 10.214.0
NODE_IP="$PREFIX.1"
API_PORT=16443
ETCD_PORT=23790
KUBELET_PORT=10260
# the Kueue manager's ports (none of the machine's ephemeral range, none of the cluster's): the webhook server on
# 127.0.0.1 (the API server calls it there), health and metrics on 127.0.0.1, the visibility server on the
# node's address (an EndpointSlice cannot name a loopback address)
KUEUE_WEBHOOK_PORT=10270
KUEUE_HEALTH_PORT=10271
KUEUE_METRICS_PORT=10272
KUEUE_VISIBILITY_PORT=10273
KUEUE_ROOT="$K8S_DIR/kueue-root"
PKI="$K8S_DIR/pki"
LOGS="$K8S_DIR/logs"
CONTAINERD_SOCK="$RUN_DIR/containerd.sock"
PLUGIN_DIR=/var/lib/kubelet/device-plugins  # the kubelet's device-plugin directory is fixed (v1beta1)
MARKER=.jhgpu-k8s-state  # in $K8S_DIR: written by start; stop removes nothing of a directory without it
#: the host settings the kubelet (or the CNI bridge) changes: saved at start, restored at stop
SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys
    kernel.keys.root_maxbytes net.ipv4.ip_forward)

log() { printf '[k8s-setup] %s\n' "$*" >&2; }
die() {
    printf '[k8s-setup] ERROR: %s\n' "$*" >&2
    exit 1
}

[[ $K8S_SUBNET =~ ^[0-9]+\.[0-9]+\.[0-9]+\.0/24$ ]] || die "K8S_SUBNET must be an a.b.c.0/24 subnet, not '$K8S_SUBNET'"
case "$K8S_DIR" in
/ | /var | /var/lib | /run | /srv | /home | /root | /etc | /usr | /opt | /tmp) die "K8S_DIR=$K8S_DIR: use a directory of its own" ;;
esac

install_packages() {
    local missing=()
    command -v containerd >/dev/null || missing+=(containerd)
    command -v runc >/dev/null || missing+=(runc)
    [[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
    command -v openssl >/dev/null || missing+=(openssl)
    command -v ip >/dev/null || missing+=(iproute2)
    command -v curl >/dev/null || missing+=(curl)
    python3 -c 'import yaml' 2>/dev/null || missing+=(python3-yaml)  # scripts/kueue-apply.py reads Kueue's YAML
    [[ ${#missing[@]} -eq 0 ]] && return 0
    log "installing ${missing[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
        { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
}

# -- certificates -------------------------------------------------------------------------------------------
# cert NAME CN [O] [SANS]: a key and a certificate signed by the cluster's CA
cert() { signed_by ca "$@"; }

# signed_by CA NAME CN [O] [SANS]: a key and a certificate signed by $PKI/CA.crt
signed_by() {
    local ca=$1 name=$2 cn=$3 org=${4:-} sans=${5:-}
    [[ -s $PKI/$name.crt ]] && return 0
    local subj="/CN=$cn"
    [[ -n $org ]] && subj="/O=$org$subj"
    openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
    openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=serverAuth,clientAuth"
        [[ -n $sans ]] && echo "subjectAltName=$sans"
    } >"$PKI/$name.ext"
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
        -days 3650 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
}

kubeconfig() {
    local name=$1
    cat >"$K8S_DIR/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: jhgpu-sim
  cluster:
    certificate-authority: $PKI/ca.crt
    server: https://127.0.0.1:$API_PORT
users:
- name: $name
  user:
    client-certificate: $PKI/$name.crt
    client-key: $PKI/$name.key
contexts:
- name: jhgpu-sim
  context: {cluster: jhgpu-sim, user: $name}
current-context: jhgpu-sim
EOF
}

make_pki() {
    mkdir -p "$PKI"
    # the cluster's CA, and the front proxy's: the aggregation layer's client certificate (the API server's,
    # when it forwards a request to the visibility server) is of a CA of its own, which vouches for it alone
    local ca
    for ca in ca front-proxy-ca; do
        if [[ ! -s $PKI/$ca.crt ]]; then
            openssl genrsa -out "$PKI/$ca.key" 2048 2>/dev/null
            openssl req -x509 -new -key "$PKI/$ca.key" -subj "/CN=jhgpu-sim-$ca" -days 3650 -out "$PKI/$ca.crt" 2>/dev/null
        fi
    done
    signed_by front-proxy-ca front-proxy-client front-proxy-client
    [[ -s $PKI/sa.key ]] || {
        openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
        openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    }
    cert apiserver kube-apiserver "" \
        "IP:127.0.0.1,IP:$NODE_IP,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    cert etcd-server jhgpu-etcd "" "IP:127.0.0.1,DNS:localhost"
    cert apiserver-etcd-client kube-apiserver-etcd-client
    cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
    cert admin admin system:masters
    cert controller-manager system:kube-controller-manager
    cert scheduler system:kube-scheduler
    cert kubelet "system:node:$NODE" system:nodes
    cert kubelet-serving "system:node:$NODE" system:nodes "IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE"
    for n in admin controller-manager scheduler kubelet; do kubeconfig "$n"; done
    # Kueue's manager (its RBAC: scripts/kueue-apply.py), its webhook server, its visibility server (the
    # aggregation layer checks the name of the visibility-server Service)
    cert kueue-manager kueue-manager
    cert kueue-webhook kueue-webhook "" "IP:127.0.0.1,DNS:localhost"
    cert kueue-metrics kueue-metrics "" "IP:127.0.0.1,DNS:localhost"
    cert kueue-visibility visibility-server.kueue-system.svc "" \
        "DNS:visibility-server.kueue-system.svc,DNS:visibility-server.kueue-system.svc.cluster.local,IP:$NODE_IP"
}

# -- processes ----------------------------------------------------------------------------------------------
# running NAME: its recorded pid is alive and is still that program (a pid reused by something else is not ours)
running() {
    local pid
    [[ -s $RUN_DIR/$1.pid ]] || return 1
    pid=$(cat "$RUN_DIR/$1.pid")
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == *"$1"* ]]
}

# launch NAME CMD...: start in the background (own session), log to $LOGS/NAME.log, pid in $RUN_DIR
launch() {
    local name=$1
    shift
    running "$name" && return 0
    # no proxy: the API server reaches the kubelet on the bridge, never through a proxy of the environment
    # fd 8 is the start/stop lock, and a caller's lock may be open too (`flock FILE scripts/k8s-setup.sh` passes
    # fd 3): a daemon that kept one open would hold that lock for as long as it runs
    setsid nohup env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY "$@" >>"$LOGS/$name.log" 2>&1 </dev/null \
        3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
    echo $! >"$RUN_DIR/$name.pid"
    disown $! 2>/dev/null || true
}

api() { curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$@"; }

# wait_for WHAT SECONDS COMMAND...
wait_for() {
    local what=$1 limit=$2 waited=0
    shift 2
    until "$@" >/dev/null 2>&1; do
        if ((waited >= limit)); then
            log "gave up waiting ${limit}s for $what; last lines of the logs:"
            for f in "$LOGS"/*.log; do
                echo "== $f" >&2
                tail -n 15 "$f" >&2
            done
            die "$what did not come up"
        fi
        sleep 1
        waited=$((waited + 1))
    done
}

write_configs() {
    mkdir -p "$K8S_DIR/cni" "$K8S_DIR/kubelet" "$PLUGIN_DIR"
    install -d -m 0700 "$K8S_DIR/volumes"
    cat >"$K8S_DIR/containerd.toml" <<EOF
version = 2
root = "$K8S_DIR/containerd"
state = "$RUN_DIR/containerd"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # the kubelet asks for oom_score_adj -998 (pause) and -997 (Guaranteed pods); lowering a process's below
  # containerd's own needs CAP_SYS_RESOURCE, which root lacks on these machines (runc: "failed to update
  # /proc/self/oom_score_adj: Permission denied"): keep it at containerd's
  restrict_oom_score_adj = true
  # the pods' network namespaces under $RUN_DIR, so that stop removes ours and nobody else's
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$K8S_DIR/cni"
EOF
    cat >"$K8S_DIR/cni/10-jhgpu.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "jhgpu",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$K8S_SUBNET", "gateway": "$NODE_IP", "rangeStart": "$PREFIX.10"}]],
        "dataDir": "$K8S_DIR/cni-ipam"
      }
    }
  ]
}
EOF
    cat >"$K8S_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10258
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
maxPods: 40
podLogsDir: $K8S_DIR/pod-logs
resolvConf: ""
registerWithTaints:
- {key: nvidia.com/gpu, value: present, effect: NoSchedule}
EOF
}

make_bridge() {
    local routes
    routes=$(ip -4 route show match "$NODE_IP" | grep -v "dev $BRIDGE" | grep -v "^default" || true)
    [[ -z $routes ]] || die "K8S_SUBNET $K8S_SUBNET overlaps a route of this machine ($routes): choose another"
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
    fi
    local addrs
    addrs=$(ip -4 addr show dev "$BRIDGE")  # not piped into grep -q: pipefail would see ip's SIGPIPE
    [[ $addrs == *"inet $NODE_IP/"* ]] || ip addr add "$NODE_IP/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
}

import_images() {
    local ctr=(ctr --address "$CONTAINERD_SOCK" -n k8s.io)
    local images
    images=$("${ctr[@]}" images ls -q)
    if [[ $'\n'$images$'\n' != *$'\n'$PAUSE_IMAGE$'\n'* ]]; then
        log "making $PAUSE_IMAGE from our pause binary"
        local tmp
        tmp=$(mktemp -d)
        cp "$BIN/pause" "$tmp/pause"
        tar -C "$tmp" -c pause | docker import -c 'ENTRYPOINT ["/pause"]' - "$PAUSE_IMAGE" >/dev/null
        rm -rf "$tmp"
        docker save "$PAUSE_IMAGE" | "${ctr[@]}" images import - >/dev/null
        docker rmi "$PAUSE_IMAGE" >/dev/null  # only containerd keeps it
    fi
    # the test images: each imported again when Docker's copy changed (its id is kept beside it)
    local image id key
    for image in "$K8S_IMAGE" "$K8S_HUB_IMAGE"; do
        id=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null) ||
            die "no Docker image $image: run make tf-test-image and make k8s-hub-image first"
        key="$K8S_DIR/image-$(printf '%s' "$image" | tr -c 'a-zA-Z0-9.-' _).id"
        if [[ "$(cat "$key" 2>/dev/null)" != "$id" ]]; then
            log "importing $image into containerd"
            docker save "$image" | "${ctr[@]}" images import - >/dev/null
            echo "$id" >"$key"
        fi
    done
}

apply() { api -X POST -H 'Content-Type: application/json' "https://127.0.0.1:$API_PORT$1" -d "$2" >/dev/null || api "https://127.0.0.1:$API_PORT$1/$3" >/dev/null; }

make_storage() {
    apply /apis/storage.k8s.io/v1/storageclasses \
        '{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"jhgpu-local","annotations":{"storageclass.kubernetes.io/is-default-class":"true"}},"provisioner":"kubernetes.io/no-provisioner","volumeBindingMode":"Immediate","reclaimPolicy":"Retain"}' \
        jhgpu-local
    local i
    for i in $(seq -w 1 16); do
        # the server's uid alone (the kubelet, root, bind-mounts it: no one else on the machine reads a student's files)
        install -d -o 1000 -g 100 -m 0700 "$K8S_DIR/volumes/pv-$i"
        apply /api/v1/persistentvolumes \
            "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{\"name\":\"jhgpu-pv-$i\"},\"spec\":{\"capacity\":{\"storage\":\"10Gi\"},\"accessModes\":[\"ReadWriteOnce\"],\"persistentVolumeReclaimPolicy\":\"Retain\",\"storageClassName\":\"jhgpu-local\",\"hostPath\":{\"path\":\"$K8S_DIR/volumes/pv-$i\",\"type\":\"Directory\"}}}" \
            "jhgpu-pv-$i"
    done
}

node_ready() {
    api "https://127.0.0.1:$API_PORT/api/v1/nodes/$NODE" | python3 -c '
import json, sys
node = json.load(sys.stdin)
ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
gpus = int(node["status"].get("allocatable", {}).get("nvidia.com/gpu", "0"))
sys.exit(0 if ready and gpus == int(sys.argv[1]) else 1)' "$K8S_GPUS"
}

# another kubelet on this machine owns the fixed device-plugin directory: ours must not take it over
foreign_kubelet() {
    local pid
    for pid in $(pgrep -x kubelet || true); do
        [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == *"$K8S_DIR/kubelet.yaml"* ]] || return 0
    done
    return 1
}

save_host_settings() {
    [[ -s $K8S_DIR/host-sysctls ]] && return 0  # the values from before our first start
    local name
    for name in "${SYSCTLS[@]}"; do
        echo "$name=$(sysctl -n "$name" 2>/dev/null)"
    done >"$K8S_DIR/host-sysctls"
}

restore_host_settings() {
    [[ -s $K8S_DIR/host-sysctls ]] || return 0
    local line
    while IFS= read -r line; do
        [[ $line == *=?* ]] && sysctl -q -w "$line" >/dev/null 2>&1 || true
    done <"$K8S_DIR/host-sysctls"
    # the kubelet's own iptables chains (IPv4 and IPv6)
    local tool chain table
    for tool in iptables ip6tables; do
        command -v "$tool" >/dev/null || continue
        for table in filter nat mangle; do
            "$tool" -t "$table" -D INPUT -j KUBE-FIREWALL 2>/dev/null || true
            "$tool" -t "$table" -D OUTPUT -j KUBE-FIREWALL 2>/dev/null || true
            for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
                "$tool" -t "$table" -F "$chain" 2>/dev/null && "$tool" -t "$table" -X "$chain" 2>/dev/null || true
            done
        done
    done
}

start() {
    install_packages
    BIN=$(bash "$REPO_ROOT/scripts/k8s-build.sh" | tail -n 1)
    KUEUE_BIN=$(bash "$REPO_ROOT/scripts/kueue-build.sh" | tail -n 1)
    if foreign_kubelet; then
        die "another kubelet runs on this machine: the test cluster would take over its device plugins"
    fi
    mkdir -p "$K8S_DIR" "$RUN_DIR"
    chmod 0755 "$K8S_DIR"
    touch "$K8S_DIR/$MARKER"
    mkdir -p "$LOGS"
    save_host_settings
    make_pki
    write_configs
    make_bridge

    launch containerd containerd --config "$K8S_DIR/containerd.toml"
    # etcd speaks TLS and wants a client certificate of the cluster's CA: a local user cannot read the store
    launch etcd "$BIN/etcd" --name jhgpu-sim --data-dir "$K8S_DIR/etcd" \
        --listen-client-urls "https://127.0.0.1:$ETCD_PORT" --advertise-client-urls "https://127.0.0.1:$ETCD_PORT" \
        --cert-file "$PKI/etcd-server.crt" --key-file "$PKI/etcd-server.key" \
        --client-cert-auth --trusted-ca-file "$PKI/ca.crt" \
        --listen-peer-urls https://127.0.0.1:23800 --initial-advertise-peer-urls https://127.0.0.1:23800 \
        --peer-cert-file "$PKI/etcd-server.crt" --peer-key-file "$PKI/etcd-server.key" \
        --peer-client-cert-auth --peer-trusted-ca-file "$PKI/ca.crt" \
        --initial-cluster jhgpu-sim=https://127.0.0.1:23800 --listen-metrics-urls "" --log-level warn
    wait_for etcd 30 curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/apiserver-etcd-client.crt" \
        --key "$PKI/apiserver-etcd-client.key" "https://127.0.0.1:$ETCD_PORT/health"
    launch kube-apiserver "$BIN/kube-apiserver" \
        --etcd-servers "https://127.0.0.1:$ETCD_PORT" --etcd-cafile "$PKI/ca.crt" \
        --etcd-certfile "$PKI/apiserver-etcd-client.crt" --etcd-keyfile "$PKI/apiserver-etcd-client.key" \
        --bind-address 127.0.0.1 --secure-port "$API_PORT" \
        --advertise-address "$NODE_IP" --endpoint-reconciler-type none \
        --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
        --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
        --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP \
        --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
        --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.96.0.0/24 \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged=false \
        --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
        --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
        --requestheader-extra-headers-prefix X-Remote-Extra- \
        --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
        --enable-aggregator-routing=true
    wait_for kube-apiserver 90 api "https://127.0.0.1:$API_PORT/readyz"
    launch kube-controller-manager "$BIN/kube-controller-manager" \
        --kubeconfig "$K8S_DIR/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$K8S_DIR/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$K8S_DIR/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port 10267 --leader-elect=false --use-service-account-credentials \
        --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
        --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
        --controllers '*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle'
    launch kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$K8S_DIR/scheduler.kubeconfig" \
        --authentication-kubeconfig "$K8S_DIR/scheduler.kubeconfig" \
        --authorization-kubeconfig "$K8S_DIR/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port 10269 --leader-elect=false
    wait_for containerd 30 test -S "$CONTAINERD_SOCK"
    import_images
    launch kubelet "$BIN/kubelet" --config "$K8S_DIR/kubelet.yaml" --kubeconfig "$K8S_DIR/kubelet.kubeconfig" \
        --root-dir "$K8S_DIR/kubelet" --hostname-override "$NODE" --node-ip "$NODE_IP" \
        --node-labels "nvidia.com/gpu.product=Simulated-T4,nvidia.com/gpu.memory=15360,nvidia.com/gpu.count=$K8S_GPUS"
    NVML_SIM_ROOT="$K8S_NVML_ROOT" NVML_SIM_GPUS="T4x$K8S_GPUS" NVML_SIM_KEEP=0 bash "$REPO_ROOT/scripts/nvml-sim-setup.sh"
    launch gpu-device-plugin-sim "$BIN/gpu-device-plugin-sim" -dir "$PLUGIN_DIR" -count "$K8S_GPUS" \
        -nvml-root "$K8S_NVML_ROOT"
    make_storage
    start_kueue
    wait_for "the node with $K8S_GPUS simulated GPUs" "$K8S_WAIT_S" node_ready
    log "ready: KUBECONFIG=$K8S_DIR/admin.kubeconfig (node $NODE, $K8S_GPUS simulated nvidia.com/gpu, pods on $K8S_SUBNET)"
}

# -- Kueue ---------------------------------------------------------------------------------------------------
# the Kueue module's directory in Go's module cache (downloaded if missing): CRDs, webhooks, RBAC, APIServices
kueue_module() {
    command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"
    (cd "$REPO_ROOT/tools/kueue" && go mod download -json sigs.k8s.io/kueue) |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'
}

# the manager's chroot: its binary (static), configuration, kubeconfig and certificates, nothing else; the
# visibility server reads its certificate from /visibility and the metrics server from /etc/kueue/metrics/certs,
# paths Kueue fixes (the chroot keeps them off the machine's own /)
kueue_root() {
    install -d -m 0700 "$KUEUE_ROOT"
    mkdir -p "$KUEUE_ROOT/pki" "$KUEUE_ROOT/webhook" "$KUEUE_ROOT/visibility" "$KUEUE_ROOT/etc/kueue/metrics/certs" \
        "$KUEUE_ROOT/tmp" "$KUEUE_ROOT/proc"
    cp "$PKI/kueue-metrics.crt" "$KUEUE_ROOT/etc/kueue/metrics/certs/tls.crt"
    cp "$PKI/kueue-metrics.key" "$KUEUE_ROOT/etc/kueue/metrics/certs/tls.key"
    cmp -s "$KUEUE_BIN/kueue" "$KUEUE_ROOT/kueue" || cp "$KUEUE_BIN/kueue" "$KUEUE_ROOT/kueue"
    cp "$PKI/ca.crt" "$PKI/kueue-manager.crt" "$PKI/kueue-manager.key" "$KUEUE_ROOT/pki/"
    cp "$PKI/kueue-webhook.crt" "$KUEUE_ROOT/webhook/tls.crt"
    cp "$PKI/kueue-webhook.key" "$KUEUE_ROOT/webhook/tls.key"
    cp "$PKI/kueue-visibility.crt" "$KUEUE_ROOT/visibility/tls.crt"
    cp "$PKI/kueue-visibility.key" "$KUEUE_ROOT/visibility/tls.key"
    cat >"$KUEUE_ROOT/kueue.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: jhgpu-sim
  cluster: {certificate-authority: /pki/ca.crt, server: "https://127.0.0.1:$API_PORT"}
users:
- name: kueue-manager
  user: {client-certificate: /pki/kueue-manager.crt, client-key: /pki/kueue-manager.key}
contexts:
- name: jhgpu-sim
  context: {cluster: jhgpu-sim, user: kueue-manager}
current-context: jhgpu-sim
EOF
    # the integrations the hub uses (plain pods: notebooks; batch/v1 Jobs: training beside them); no pod of
    # kube-system or kueue-system is ever gated; the certificates are ours (no internal certificate manager)
    cat >"$KUEUE_ROOT/config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_HEALTH_PORT
metrics:
  bindAddress: 127.0.0.1:$KUEUE_METRICS_PORT
webhook:
  host: 127.0.0.1
  port: $KUEUE_WEBHOOK_PORT
  certDir: /webhook
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
manageJobsWithoutQueueName: false
managedJobsNamespaceSelector:
  matchExpressions:
  - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, kueue-system]}
integrations:
  frameworks: ["batch/job", "pod"]
visibilityServer:
  bindAddress: $NODE_IP
  bindPort: $KUEUE_VISIBILITY_PORT
clientConnection:
  qps: 50
  burst: 100
EOF
}

start_kueue() {
    local module
    module=$(kueue_module)
    [[ -d $module/config/components/crd/bases ]] || die "no Kueue CRDs in $module"
    export KUEUE_MODULE="$module" K8S_PKI="$PKI" K8S_API="https://127.0.0.1:$API_PORT" K8S_NODE_IP="$NODE_IP" \
        KUEUE_WEBHOOK_PORT KUEUE_VISIBILITY_PORT KUEUE_USER=kueue-manager
    python3 "$REPO_ROOT/scripts/kueue-apply.py" crds
    kueue_root
    # /proc of the chroot in a mount namespace of the manager's own: it goes with the process, nothing to unmount
    # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
    launch kueue unshare --mount --propagation private -- sh -c \
        'mount -t proc -o ro,nosuid,nodev,noexec proc "$0/proc" && exec chroot "$0" /kueue "$@"' \
        "$KUEUE_ROOT" --config /config.yaml --kubeconfig /kueue.kubeconfig
    wait_for "the Kueue manager" 120 curl -sf "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz"
    python3 "$REPO_ROOT/scripts/kueue-apply.py" webhooks
    log "Kueue $(basename "$module" | sed 's/.*@//') runs: webhooks on 127.0.0.1:$KUEUE_WEBHOOK_PORT, visibility API served"
}

stop() {
    local name pid
    if [[ -d $K8S_DIR && ! -e $K8S_DIR/$MARKER ]]; then
        die "$K8S_DIR is not the test cluster's state (no $MARKER): nothing removed"
    fi
    # the kubelet first (it would restart what we remove), then the pods' containers, then the control plane
    for name in gpu-device-plugin-sim kubelet; do
        if running "$name"; then kill "$(cat "$RUN_DIR/$name.pid")" 2>/dev/null || true; fi
    done
    sleep 1
    if [[ -S $CONTAINERD_SOCK ]] && command -v crictl >/dev/null; then
        crictl -r "unix://$CONTAINERD_SOCK" rmp -fa >/dev/null 2>&1 || true
    fi
    if [[ -S $CONTAINERD_SOCK ]]; then
        # every task of the k8s.io namespace, then the shims exit with them
        for pid in $(ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
            ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks kill -s SIGKILL "$pid" >/dev/null 2>&1 || true
        done
    fi
    for name in kueue kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do
        if running "$name"; then kill "$(cat "$RUN_DIR/$name.pid")" 2>/dev/null || true; fi
    done
    sleep 2
    for name in gpu-device-plugin-sim kubelet kueue kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do
        if running "$name"; then kill -9 "$(cat "$RUN_DIR/$name.pid")" 2>/dev/null || true; fi
        rm -f "$RUN_DIR/$name.pid"
    done
    pkill -f "containerd-shim-runc-v2 -namespace k8s.io -address $CONTAINERD_SOCK" 2>/dev/null || true
    # the kubelet's mounts (projected tokens, hostPath) and the pods' network namespaces, all under our two
    # directories, then the state itself
    local mounts
    mounts=$(grep -oE " ($K8S_DIR|$RUN_DIR)/[^ ]*" /proc/mounts | sort -r || true)
    for m in $mounts; do umount -l "$m" 2>/dev/null || true; done
    ip link del "$BRIDGE" 2>/dev/null || true
    # the pods' cgroups (empty now), the CNI plugins' cache of our network
    local d
    if ! foreign_kubelet; then
        for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
            [[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
        done
    fi
    rm -f /var/lib/cni/results/jhgpu-* 2>/dev/null || true
    restore_host_settings
    if [[ ${KEEP_STATE:-0} != 1 ]]; then
        if ! foreign_kubelet; then
            rm -f "$PLUGIN_DIR"/gpu-sim-*.sock "$PLUGIN_DIR"/kubelet_internal_checkpoint "$PLUGIN_DIR"/kubelet.sock
        fi
        rm -rf --one-file-system "$K8S_DIR" "$RUN_DIR"
    fi
    log "stopped"
}

status() {
    local name
    for name in containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet gpu-device-plugin-sim kueue; do
        if running "$name"; then echo "$name: running (pid $(cat "$RUN_DIR/$name.pid"))"; else echo "$name: stopped"; fi
    done
}

# one start or stop at a time on this machine (two checkouts share the one cluster)
mkdir -p "$(dirname "$RUN_DIR")"
exec 8>"$(dirname "$RUN_DIR")/jhgpu-k8s.lock"
case "${1:-start}" in
start) flock 8 && start ;;
stop) flock 8 && stop ;;
status) status ;;
*) die "usage: $0 [start|stop|status]" ;;
esac
