// Command gpu-device-plugin-sim is a simulated NVIDIA device plugin for the k8s test layer: it speaks the
// kubelet's device-plugin API (v1beta1: registration, ListAndWatch, Allocate) the way NVIDIA's plugin does and
// advertises -count devices of -resource with IDs GPU-sim-0, GPU-sim-1, ...; Allocate answers with
// NVIDIA_VISIBLE_DEVICES set to the IDs the kubelet chose, as the real plugin does. There is no GPU behind
// them: everything it hands out is simulated, and its IDs say so.
//
// With -nvml-root (the stand-in NVIDIA driver's root, scripts/nvml-sim-setup.sh), the devices are the
// stand-in driver's GPUs, by their UUIDs, and Allocate also does what NVIDIA's container toolkit does for a
// pod: it mounts the driver library (/usr/lib/libnvidia-ml.so.1), the driver's state (/run/nvidia-sim) and
// the device node of each chosen GPU (/dev/nvidia<minor>), so that NVML inside the pod lists exactly the
// GPUs the kubelet chose, and the server reads them with pynvml as on a real GPU node.
//
// It registers again whenever the kubelet restarts (the kubelet removes the plugins' sockets then).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	// the stand-in driver's root ("": IDs only), and each device's node minor
	nvmlRoot string
	minors   map[string]string
}

// standinGPUs reads the stand-in driver's state: each GPU's UUID and device-node minor, in state order.
func standinGPUs(root string) ([][2]string, error) {
	f, err := os.Open(filepath.Join(root, "state", "nvml.state"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var gpus [][2]string
	scan := bufio.NewScanner(f)
	for scan.Scan() {
		line := scan.Text()
		if !strings.HasPrefix(line, "gpu ") {
			continue
		}
		fields := map[string]string{}
		for _, tok := range strings.Fields(strings.SplitN(line, " name=", 2)[0]) {
			if k, v, ok := strings.Cut(tok, "="); ok {
				fields[k] = v
			}
		}
		if fields["uuid"] == "" || fields["minor"] == "" {
			return nil, fmt.Errorf("a GPU of the stand-in's state has no uuid or minor: %q", line)
		}
		gpus = append(gpus, [2]string{fields["uuid"], fields["minor"]})
	}
	return gpus, scan.Err()
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once, all healthy, then holds the stream open until the kubelet closes it.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// Allocate makes the chosen devices, and only those, visible to the container, as NVIDIA's plugin does with
// its default envvar strategy.
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		for _, id := range c.DevicesIds {
			if !p.known(id) {
				return nil, fmt.Errorf("unknown device %q", id)
			}
		}
		ids := strings.Join(c.DevicesIds, ",")
		log.Printf("allocate %s", ids)
		r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": ids}}
		if p.nvmlRoot != "" {
			r.Mounts = []*pluginapi.Mount{
				{ContainerPath: "/usr/lib/libnvidia-ml.so.1", HostPath: filepath.Join(p.nvmlRoot, "lib", "libnvidia-ml.so.1"), ReadOnly: true},
				{ContainerPath: "/run/nvidia-sim", HostPath: filepath.Join(p.nvmlRoot, "state"), ReadOnly: true},
			}
			for _, id := range c.DevicesIds {
				node := "nvidia" + p.minors[id]
				r.Mounts = append(r.Mounts, &pluginapi.Mount{
					ContainerPath: "/dev/" + node, HostPath: filepath.Join(p.nvmlRoot, "dev", node), ReadOnly: false,
				})
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (p *plugin) known(id string) bool {
	for _, d := range p.devices {
		if d.ID == id {
			return true
		}
	}
	return false
}

// serve listens on the plugin's socket and registers with the kubelet; it returns the server to stop.
func serve(p *plugin, dir, socketName, resource string) (*grpc.Server, error) {
	sock := filepath.Join(dir, socketName)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     socketName,
		ResourceName: resource,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		srv.Stop()
		return nil, err
	}
	log.Printf("registered %d %s devices (simulated) with the kubelet", len(p.devices), resource)
	return srv, nil
}

func main() {
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	resource := flag.String("resource", "nvidia.com/gpu", "the extended resource to advertise")
	count := flag.Int("count", 4, "how many simulated devices")
	prefix := flag.String("prefix", "GPU-sim-", "device ID prefix (IDs are prefix + index)")
	nvmlRoot := flag.String("nvml-root", "", "the stand-in NVIDIA driver's root: its GPUs, library and state")
	flag.Parse()
	if *count < 1 || *count > 64 {
		log.Fatalf("-count must be 1 to 64, not %d", *count)
	}
	p := &plugin{nvmlRoot: *nvmlRoot, minors: map[string]string{}}
	if *nvmlRoot != "" {
		gpus, err := standinGPUs(*nvmlRoot)
		if err != nil {
			log.Fatalf("-nvml-root %s: %v", *nvmlRoot, err)
		}
		if len(gpus) < *count {
			log.Fatalf("-nvml-root %s has %d GPU(s), fewer than -count %d", *nvmlRoot, len(gpus), *count)
		}
		for _, g := range gpus[:*count] {
			p.devices = append(p.devices, &pluginapi.Device{ID: g[0], Health: pluginapi.Healthy})
			p.minors[g[0]] = g[1]
		}
	} else {
		for i := 0; i < *count; i++ {
			p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("%s%d", *prefix, i), Health: pluginapi.Healthy})
		}
	}
	socketName := "gpu-sim-" + strings.NewReplacer("/", "-", ".", "-").Replace(*resource) + ".sock"
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)

	var srv *grpc.Server
	for {
		if srv == nil {
			s, err := serve(p, *dir, socketName, *resource)
			if err != nil {
				log.Printf("waiting for the kubelet: %v", err)
			} else {
				srv = s
			}
		} else if _, err := os.Stat(filepath.Join(*dir, socketName)); err != nil {
			// the kubelet restarted and removed our socket: serve and register again
			log.Printf("socket gone (kubelet restart?): registering again")
			srv.Stop()
			srv = nil
			continue
		}
		select {
		case <-stop:
			if srv != nil {
				srv.Stop()
			}
			return
		case <-time.After(time.Second):
		}
	}
}
