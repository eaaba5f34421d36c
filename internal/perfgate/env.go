package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// testImage is the image every pair runs (scripts/docker-setup.sh builds it).
const testImage = "sandboxkit-test/busybox:1"

// env is what the pairs run: this build's sbx, configs of each backend in
// a folder of the run's own, and a runc bundle of the test image.
type env struct {
	work                                             string
	sbx, nop                                         string
	localConfig, liteConfig, nativeConfig, k8sConfig string
	// nativeGVisorConfig and liteGVisorConfig are nativeConfig and
	// liteConfig with runtime = "gvisor".
	nativeGVisorConfig, liteGVisorConfig string
	// nativeGVisorReleaseConfig and liteGVisorReleaseConfig run gVisor's
	// release (scripts/gvisor-release.sh): native by the runtime name it
	// is registered under, lite with it as [sandbox.lite] runtime, which
	// runtime = "gvisor" then means.
	nativeGVisorReleaseConfig, liteGVisorReleaseConfig string
	bundle, runcRoot                                   string
}

func newEnv() (*env, error) {
	work, err := os.MkdirTemp("", "perfgate-")
	if err != nil {
		return nil, err
	}
	e := &env{work: work, sbx: filepath.Join(work, "sbx"), nop: filepath.Join(work, "nop"), runcRoot: filepath.Join(work, "runc")}
	// sbx, and the sbx-full it hands the k8s backend to next to it.
	for _, name := range []string{"sbx", "sbx-full"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(work, name), "./cmd/"+name).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %v: %s", name, err, out)
		}
	}
	nopSrc := filepath.Join(work, "nop.go")
	if err := os.WriteFile(nopSrc, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command("go", "build", "-o", e.nop, nopSrc).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the floor program: %v: %s", err, out)
	}
	write := func(name, text string) (string, error) {
		p := filepath.Join(work, name)
		return p, os.WriteFile(p, []byte(text), 0o644)
	}
	if e.localConfig, err = write("local.toml", fmt.Sprintf("[sandbox]\nbackend = \"local\"\n[sandbox.local]\nstate_dir = %q\n", filepath.Join(work, "local"))); err != nil {
		return nil, err
	}
	if e.nativeConfig, err = write("native.toml", fmt.Sprintf("[sandbox]\nbackend = \"native\"\n[sandbox.native]\npull_policy = \"never\"\n[sandbox.sandboxes.main]\nimage = %q\n", testImage)); err != nil {
		return nil, err
	}
	if e.nativeGVisorConfig, err = write("native-gvisor.toml", fmt.Sprintf("[sandbox]\nbackend = \"native\"\nruntime = \"gvisor\"\n[sandbox.native]\npull_policy = \"never\"\n[sandbox.sandboxes.main]\nimage = %q\n", testImage)); err != nil {
		return nil, err
	}
	if e.nativeGVisorReleaseConfig, err = write("native-gvisor-release.toml", fmt.Sprintf("[sandbox]\nbackend = \"native\"\nruntime = %q\n[sandbox.native]\npull_policy = \"never\"\n[sandbox.sandboxes.main]\nimage = %q\n", filepath.Base(gvisorReleasePath()), testImage)); err != nil {
		return nil, err
	}
	if needDocker(e) == "" {
		// lite takes the same image from a docker save archive, and the
		// runc floor runs its root file system.
		archive := filepath.Join(work, "busybox.tar")
		if out, err := exec.Command("docker", "save", "-o", archive, testImage).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("docker save: %v: %s", err, out)
		}
		lite := filepath.Join(work, "lite")
		if e.liteConfig, err = write("lite.toml", fmt.Sprintf("[sandbox]\nbackend = \"lite\"\n[sandbox.lite]\nstate_dir = %q\nimage_dir = %q\nruntime_root = %q\n[sandbox.sandboxes.main]\nimage = %q\n",
			filepath.Join(lite, "state"), filepath.Join(lite, "images"), filepath.Join(lite, "runtime"), "docker-archive:"+archive)); err != nil {
			return nil, err
		}
		if e.liteGVisorConfig, err = write("lite-gvisor.toml", fmt.Sprintf("[sandbox]\nbackend = \"lite\"\nruntime = \"gvisor\"\n[sandbox.lite]\nstate_dir = %q\nimage_dir = %q\nruntime_root = %q\n[sandbox.sandboxes.main]\nimage = %q\n",
			filepath.Join(lite, "state"), filepath.Join(lite, "images"), filepath.Join(lite, "runtime"), "docker-archive:"+archive)); err != nil {
			return nil, err
		}
		if e.liteGVisorReleaseConfig, err = write("lite-gvisor-release.toml", fmt.Sprintf("[sandbox]\nbackend = \"lite\"\nruntime = \"gvisor\"\n[sandbox.lite]\nruntime = %q\nstate_dir = %q\nimage_dir = %q\nruntime_root = %q\n[sandbox.sandboxes.main]\nimage = %q\n",
			gvisorReleasePath(), filepath.Join(lite, "state"), filepath.Join(lite, "images"), filepath.Join(lite, "runtime"), "docker-archive:"+archive)); err != nil {
			return nil, err
		}
		if e.bundle, err = makeBundle(work, archive); err != nil {
			return nil, fmt.Errorf("runc bundle: %w", err)
		}
	}
	if kube := k8sEnv()["SBX_K8S_KUBECONFIG"]; kube != "" {
		if e.k8sConfig, err = write("k8s.toml", fmt.Sprintf("[sandbox]\nbackend = \"k8s\"\n[sandbox.k8s]\nkubeconfig = %q\nnamespace = \"default\"\nimage_pull_policy = \"IfNotPresent\"\n[sandbox.sandboxes.main]\nimage = %q\n", kube, testImage)); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *env) close() {
	exec.Command(e.sbx, "--config", e.liteConfig, "gc", "--grace", "0").Run()
	// A newer runsc (the release) bind-mounts an empty network namespace
	// for its gofers at ROOT/null-netns and leaves it (stacked when made
	// concurrently): unmounted, or the run's folder stays, mounted.
	for syscall.Unmount(filepath.Join(e.work, "lite", "runtime", "null-netns"), syscall.MNT_DETACH) == nil {
	}
	os.RemoveAll(e.work)
}

// k8sEnv reads the k8s harness's env file, if it is up.
func k8sEnv() map[string]string {
	m := map[string]string{}
	data, err := os.ReadFile("/run/sandboxkit-k8s/env")
	if err != nil {
		return m
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	return m
}

// makeBundle unpacks the image in the docker save archive into a runc
// bundle (rootfs and a config that runs true, read-only, no terminal).
func makeBundle(work, archive string) (string, error) {
	bundle := filepath.Join(work, "bundle")
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return "", err
	}
	unpacked := filepath.Join(work, "image")
	if err := os.MkdirAll(unpacked, 0o755); err != nil {
		return "", err
	}
	if out, err := exec.Command("tar", "-xf", archive, "-C", unpacked).CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar: %v: %s", err, out)
	}
	var manifest []struct{ Layers []string }
	data, err := os.ReadFile(filepath.Join(unpacked, "manifest.json"))
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(data, &manifest); err != nil || len(manifest) == 0 {
		return "", fmt.Errorf("manifest.json: %v", err)
	}
	for _, l := range manifest[0].Layers {
		if err := untar(filepath.Join(unpacked, l), rootfs); err != nil {
			return "", err
		}
	}
	if out, err := exec.Command("runc", "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		return "", fmt.Errorf("runc spec: %v: %s", err, out)
	}
	cfgPath := filepath.Join(bundle, "config.json")
	var spec map[string]any
	data, err = os.ReadFile(cfgPath)
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return "", err
	}
	proc := spec["process"].(map[string]any)
	proc["terminal"], proc["args"] = false, []string{"true"}
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	data, _ = json.Marshal(spec)
	return bundle, os.WriteFile(cfgPath, data, 0o644)
}

// untar unpacks the layer tar file into dir (whiteouts are not needed:
// the test image has one layer).
func untar(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, os.FileMode(h.Mode)&os.ModePerm)
		case tar.TypeReg:
			var w *os.File
			if w, err = root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&os.ModePerm); err == nil {
				_, err = io.Copy(w, tr)
				w.Close()
			}
		case tar.TypeSymlink:
			err = root.Symlink(h.Linkname, name)
		case tar.TypeLink:
			err = root.Link(filepath.Clean(h.Linkname), name)
		}
		if err != nil && !os.IsExist(err) {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
}
