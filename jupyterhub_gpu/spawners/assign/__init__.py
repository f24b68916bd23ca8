"""Which GPUs a server gets: the allocator protocol, the wait queue, a Docker host's devices and a cluster's counts."""
