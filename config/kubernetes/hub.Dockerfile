# The hub image for Zero to JupyterHub: the chart's own hub image plus jupyterhub-gpu (with
# kubespawner, which the chart's image already has) and psycopg for the PostgreSQL ledger.
#
#   docker build -f config/kubernetes/hub.Dockerfile --build-arg K8S_HUB_TAG=<chart version> \
#       -t registry.example.edu/jupyterhub-gpu/k8s-hub:0.1.0 dist/
#
# The build context (dist/ above) holds jupyterhub-gpu's wheel (`python -m build --wheel`).
# K8S_HUB_TAG must be a chart release whose hub image has JupyterHub 6.x: jupyterhub-gpu
# requires jupyterhub>=6.1,<7, and pip refuses the install otherwise. K8S_HUB_IMAGE names a mirror
# of the chart's image if your cluster pulls through one; the k8s test layer builds this recipe on a
# local stand-in (images/k8s-hub-standin, scripts/build-k8s-hub-image.sh) and runs it as a pod.
ARG K8S_HUB_IMAGE=quay.io/jupyterhub/k8s-hub
ARG K8S_HUB_TAG
FROM ${K8S_HUB_IMAGE}:${K8S_HUB_TAG}
USER root
COPY jupyterhub_gpu-*.whl /tmp/wheels/
RUN set -eux; \
    wheel="$(ls /tmp/wheels/jupyterhub_gpu-*.whl)"; \
    pip install --no-cache-dir "${wheel}[kubernetes]" "psycopg[binary]>=3.1"; \
    rm -rf /tmp/wheels; \
    python -c "import jupyterhub_gpu.spawners.kube.spawner, psycopg"
# the chart runs the hub as uid 1000 (jovyan) whatever the image says
USER 1000
