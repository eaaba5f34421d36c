// Command fakeservice stands in for the Neo4j and Joern servers in tests on
// machines that cannot pull their images: it answers the same readiness
// probes the initializers use, and nothing more.
//
//	fakeservice neo4j   HTTP discovery on :7474, a Bolt handshake on :7687
//	fakeservice joern [PORT]  Joern's POST /query-sync on PORT (default 8081)
//	fakeservice mcp-sse [PORT]  an MCP server of its own, SSE only, on PORT
//	                    (default 1111), as OpenSage's gdb_mcp image serves:
//	                    GET /sse, and /mcp answers 501 Not Implemented
//	fakeservice never   print a line and never listen
//
// It is built and imported into a throwaway image by the tests.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fakeservice neo4j|joern [PORT]|mcp-sse [PORT]|never")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "neo4j":
		neo4j()
	case "joern":
		port := "8081"
		if len(os.Args) > 2 {
			port = os.Args[2]
		}
		joern(port)
	case "mcp-sse":
		port := "1111"
		if len(os.Args) > 2 {
			port = os.Args[2]
		}
		mcpSSE(port)
	case "never":
		fmt.Println("fakeservice: starting, but never ready")
		for {
			time.Sleep(time.Hour)
		}
	default:
		fmt.Fprintln(os.Stderr, "fakeservice: unknown mode", os.Args[1])
		os.Exit(2)
	}
}

func neo4j() {
	auth := os.Getenv("NEO4J_AUTH")
	if !strings.HasPrefix(auth, "neo4j/") {
		fmt.Fprintln(os.Stderr, "fakeservice: NEO4J_AUTH is not neo4j/PASSWORD:", auth)
		os.Exit(1)
	}
	go func() {
		ln, err := net.Listen("tcp", ":7687")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				continue
			}
			go bolt(c)
		}
	}()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{
			"bolt_routing":  "neo4j://" + r.Host + ":7687",
			"bolt_direct":   "bolt://" + r.Host + ":7687",
			"neo4j_version": "5.0.0-fake", "neo4j_edition": "community",
		})
	})
	fmt.Println("fakeservice: neo4j started")
	if err := http.ListenAndServe(":7474", nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// bolt answers a handshake with the first proposed version.
func bolt(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var req [20]byte
	if _, err := io.ReadFull(c, req[:]); err != nil {
		return
	}
	if binary.BigEndian.Uint32(req[:4]) != 0x6060B017 {
		c.Write([]byte{0, 0, 0, 0})
		return
	}
	c.Write([]byte{0, 0, req[6], req[7]})
}

func joern(port string) {
	http.HandleFunc("/query-sync", func(w http.ResponseWriter, r *http.Request) {
		var q struct {
			Query string `json:"query"`
		}
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&q) != nil {
			http.Error(w, "want POST {\"query\": ...}", http.StatusBadRequest)
			return
		}
		out := "val res: String = " + q.Query + "\n"
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"success": true, "uuid": "00000000-0000-0000-0000-000000000000", "stdout": out})
	})
	fmt.Println("fakeservice: joern started on", port)
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// mcpSSE serves MCP over SSE only, with one tool (gdb_command, echoing its
// command), as OpenSage's gdb_mcp image does from its own command.
func mcpSSE(port string) {
	server := mcp.NewServer(&mcp.Implementation{Name: "gdb-mcp-standin", Version: "1"}, nil)
	type commandIn struct {
		Command string `json:"command"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "gdb_command", Description: "Stand-in: echoes the command."},
		func(_ context.Context, _ *mcp.CallToolRequest, in commandIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "stand-in gdb: " + in.Command}}}, nil, nil
		})
	mux := http.NewServeMux()
	mux.Handle("/sse", mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return server }, nil))
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Not Implemented", http.StatusNotImplemented)
	})
	fmt.Println("fakeservice: MCP over SSE on", port)
	if err := http.ListenAndServe(":"+port, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
