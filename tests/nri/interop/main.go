// nri-interop: the runtime's side of NRI, built on the real containerd/ttrpc Go
// library (Debian's golang-github-containerd-ttrpc-dev) and Go types that
// protoc-gen-gogo generates from protos/nri, for cri-resmgr's interop tests.
// Written for cri-resmgr (tests/nri/interop/test_*.py build and drive it).
//
//	nri-interop -mode runtime -socket PATH
//	    Listens on PATH for one plugin. Serves the Runtime service (RegisterPlugin,
//	    UpdateContainers) on connection 2 and calls the plugin's services on
//	    connection 1 as told by JSON commands on stdin, one a line:
//	      {"id":1,"op":"call","service":S,"method":M,"type":T,"reply":R,"json":J,"timeout_ms":N}
//	    T and R are full protobuf names (J in protobuf JSON); without T, "raw" (base64)
//	    or "raw_size" (zero bytes) is sent as the payload as is. {"op":"close"} closes
//	    the connection (the runtime goes away).
//	nri-interop -mode launch -plugin-name N -plugin-idx I -plugin-log PATH -- COMMAND...
//	    As runtime, on a socket pair whose other end the plugin COMMAND gets as fd 3 with
//	    only NRI_PLUGIN_SOCKET=3, NRI_PLUGIN_NAME and NRI_PLUGIN_IDX in its environment,
//	    as NRI launches a pre-installed plugin; {"event":"launched","code":PID} first,
//	    {"event":"plugin-exited","code":N} when it ends.
//	nri-interop -mode serve -socket PATH
//	    Listens on PATH for one connection and serves interop.v1.Echo on connection 1:
//	    Echo answers the payload it got, Fail answers NOT_FOUND "no such thing".
//
// Everything it sees goes to stdout as JSON lines: {"event":...} and {"id":...}.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/ttrpc"
	"github.com/gogo/protobuf/jsonpb"
	"github.com/gogo/protobuf/proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "nriinterop/api"
)

const (
	pluginServiceConn  = 1
	runtimeServiceConn = 2
	runtimeService     = "nri.pkg.api.v1alpha1.Runtime"
	echoService        = "interop.v1.Echo"
)

// muxer is what the program needs of a multiplexer (mux.go has ours).
type muxer interface {
	Open(id uint32) (net.Conn, error)
	Listen(id uint32) (net.Listener, error)
	Unblock() // starts reading, once the connections are open
	Close() error
}

type command struct {
	ID        int    `json:"id"`
	Op        string `json:"op"`
	Service   string `json:"service"`
	Method    string `json:"method"`
	Type      string `json:"type"`
	Reply     string `json:"reply"`
	JSON      string `json:"json"`
	Raw       []byte `json:"raw"`
	RawSize   int    `json:"raw_size"`
	TimeoutMs int    `json:"timeout_ms"`
}

type output struct {
	ID      int    `json:"id,omitempty"`
	Event   string `json:"event,omitempty"`
	OK      bool   `json:"ok"`
	JSON    string `json:"json,omitempty"`
	Raw     []byte `json:"raw,omitempty"`
	Code    int    `json:"code"`
	Message string `json:"message,omitempty"`
}

var outLock sync.Mutex

func emit(o output) {
	data, _ := json.Marshal(o)
	outLock.Lock()
	defer outLock.Unlock()
	os.Stdout.Write(append(data, '\n'))
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "nri-interop: "+format+"\n", args...)
	os.Exit(1)
}

// raw is a payload passed through as it is: a proto.Message to ttRPC's codec.
type raw struct{ b []byte }

func (r *raw) Reset()                   { r.b = nil }
func (r *raw) String() string           { return fmt.Sprintf("raw(%d bytes)", len(r.b)) }
func (*raw) ProtoMessage()              {}
func (r *raw) Marshal() ([]byte, error) { return r.b, nil }
func (r *raw) Unmarshal(p []byte) error { r.b = append([]byte(nil), p...); return nil }

func newMessage(name string) (proto.Message, error) {
	if name == "" {
		return &raw{}, nil
	}
	t := proto.MessageType(name)
	if t == nil {
		return nil, fmt.Errorf("unknown message type %q", name)
	}
	return reflect.New(t.Elem()).Interface().(proto.Message), nil
}

func toJSON(m proto.Message) string {
	s, err := (&jsonpb.Marshaler{}).MarshalToString(m)
	if err != nil {
		return fmt.Sprintf("{\"marshal error\": %q}", err.Error())
	}
	return s
}

func acceptOne(path string) net.Conn {
	l, err := net.Listen("unix", path)
	if err != nil {
		fail("listen on %s: %v", path, err)
	}
	emit(output{Event: "listening", OK: true})
	conn, err := l.Accept()
	if err != nil {
		fail("accept on %s: %v", path, err)
	}
	l.Close()
	return conn
}

func serveOn(m muxer, id uint32, srv *ttrpc.Server) {
	l, err := m.Listen(id)
	if err != nil {
		fail("listen on connection %d: %v", id, err)
	}
	go srv.Serve(context.Background(), l)
}

func main() {
	mode := flag.String("mode", "runtime", "runtime, launch or serve")
	path := flag.String("socket", "", "unix socket to listen on (runtime, serve)")
	name := flag.String("plugin-name", "", "launch: the plugin's NRI_PLUGIN_NAME")
	idx := flag.String("plugin-idx", "", "launch: the plugin's NRI_PLUGIN_IDX")
	logPath := flag.String("plugin-log", "/dev/null", "launch: the plugin's stdout and stderr")
	flag.Parse()
	if *path == "" && *mode != "launch" {
		fail("-socket is required")
	}
	switch *mode {
	case "launch":
		launchMode(*name, *idx, *logPath, flag.Args())
	case "runtime":
		runtimeMode(*path)
	case "serve":
		serveMode(*path)
	default:
		fail("unknown -mode %q", *mode)
	}
}

func runtimeMode(path string) {
	runtimeSession(acceptOne(path), nil)
}

// launchMode starts the plugin as NRI starts a pre-installed one: one end of a socket
// pair as its fd 3, and an environment of NRI_PLUGIN_SOCKET=3, NRI_PLUGIN_NAME and
// NRI_PLUGIN_IDX only.
func launchMode(name, idx, logPath string, command []string) {
	if len(command) == 0 {
		fail("-mode launch needs the plugin's command after the flags")
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		fail("socketpair: %v", err)
	}
	local, peer := os.NewFile(uintptr(fds[0]), "runtime end"), os.NewFile(uintptr(fds[1]), "plugin end")
	conn, err := net.FileConn(local)
	if err != nil {
		fail("runtime end: %v", err)
	}
	local.Close()
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fail("plugin log %s: %v", logPath, err)
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.ExtraFiles = []*os.File{peer}
	cmd.Env = []string{"NRI_PLUGIN_NAME=" + name, "NRI_PLUGIN_IDX=" + idx, "NRI_PLUGIN_SOCKET=3"}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		fail("launch %s: %v", command[0], err)
	}
	peer.Close()
	emit(output{Event: "launched", OK: true, Code: cmd.Process.Pid})
	runtimeSession(conn, cmd)
}

func runtimeSession(conn net.Conn, launched *exec.Cmd) {
	m := newMux(conn)
	emit(output{Event: "connected", OK: true})
	if launched != nil {
		go func() {
			err := launched.Wait()
			code := 0
			if err != nil {
				code = -1
				if e, ok := err.(*exec.ExitError); ok {
					code = e.ExitCode()
				}
			}
			emit(output{Event: "plugin-exited", OK: err == nil, Code: code})
		}()
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		fail("ttrpc server: %v", err)
	}
	srv.Register(runtimeService, map[string]ttrpc.Method{
		"RegisterPlugin": func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
			req := &api.RegisterPluginRequest{}
			if err := unmarshal(req); err != nil {
				return nil, err
			}
			emit(output{Event: "RegisterPlugin", OK: true, JSON: toJSON(req)})
			return &api.Empty{}, nil
		},
		"UpdateContainers": func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
			req := &api.UpdateContainersRequest{}
			if err := unmarshal(req); err != nil {
				return nil, err
			}
			emit(output{Event: "UpdateContainers", OK: true, JSON: toJSON(req)})
			return &api.UpdateContainersResponse{}, nil
		},
	})
	serveOn(m, runtimeServiceConn, srv)
	pc, err := m.Open(pluginServiceConn)
	if err != nil {
		fail("open connection %d: %v", pluginServiceConn, err)
	}
	client := ttrpc.NewClient(pc, ttrpc.WithOnClose(func() { emit(output{Event: "closed"}) }))
	m.Unblock()

	dec := json.NewDecoder(os.Stdin)
	for {
		var cmd command
		if err := dec.Decode(&cmd); err != nil {
			m.Close()
			return // stdin closed: the test is done
		}
		switch cmd.Op {
		case "call":
			go call(client, cmd)
		case "close":
			m.Close()
			emit(output{ID: cmd.ID, OK: true})
		default:
			emit(output{ID: cmd.ID, Code: int(codes.InvalidArgument), Message: "unknown op " + cmd.Op})
		}
	}
}

func call(client *ttrpc.Client, cmd command) {
	req, err := newMessage(cmd.Type)
	if err == nil && cmd.Type != "" {
		err = (&jsonpb.Unmarshaler{}).Unmarshal(strings.NewReader(cmd.JSON), req)
	}
	if err != nil {
		emit(output{ID: cmd.ID, Code: int(codes.InvalidArgument), Message: "request: " + err.Error()})
		return
	}
	if r, ok := req.(*raw); ok {
		r.b = cmd.Raw
		if cmd.RawSize > 0 {
			r.b = make([]byte, cmd.RawSize)
		}
	}
	reply, err := newMessage(cmd.Reply)
	if err != nil {
		emit(output{ID: cmd.ID, Code: int(codes.InvalidArgument), Message: "reply: " + err.Error()})
		return
	}
	timeout := time.Duration(cmd.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := client.Call(ctx, cmd.Service, cmd.Method, req, reply); err != nil {
		st, _ := status.FromError(err)
		emit(output{ID: cmd.ID, Code: int(st.Code()), Message: st.Message()})
		return
	}
	o := output{ID: cmd.ID, OK: true}
	if r, ok := reply.(*raw); ok {
		o.Raw = r.b
	} else {
		o.JSON = toJSON(reply)
	}
	emit(o)
}

func serveMode(path string) {
	m := newMux(acceptOne(path))
	srv, err := ttrpc.NewServer()
	if err != nil {
		fail("ttrpc server: %v", err)
	}
	srv.Register(echoService, map[string]ttrpc.Method{
		"Echo": func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
			req := &raw{}
			if err := unmarshal(req); err != nil {
				return nil, err
			}
			return req, nil
		},
		"Fail": func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
			return nil, status.Error(codes.NotFound, "no such thing")
		},
	})
	serveOn(m, pluginServiceConn, srv)
	m.Unblock()
	emit(output{Event: "serving", OK: true})
	dec := json.NewDecoder(os.Stdin)
	var cmd command
	for dec.Decode(&cmd) == nil {
	}
	m.Close()
}
