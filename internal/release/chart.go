package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// LoadChart loads the chart in dir with Helm's loader and checks that its
// version and appVersion are both version: a release ships one version of
// the chart and the controller, and the chart's default image is tagged
// with the appVersion.
func LoadChart(dir, version string) (*chart.Chart, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	if m := ch.Metadata; m.Version != version || m.AppVersion != version {
		return nil, fmt.Errorf("%s has version %q and appVersion %q, but the release is %q: set both to %q (and add the release to CHANGELOG.md)",
			filepath.Join(dir, chartutil.ChartfileName), m.Version, m.AppVersion, version, version)
	}
	return ch, nil
}

// PackageChart writes ch as `helm package` does (the Helm SDK's
// chartutil.Save) into outDir, as <name>-<version>.tgz, and returns the
// file's path. chartutil.Save stamps every entry with the time of the
// call, so the archive is then rewritten with every entry's time set to
// created, and the file's modification time too: `helm push` takes the
// OCI manifest's creation time from it. The archive is otherwise Helm's
// (the same entries, in the same order, with the same gzip header).
func PackageChart(ch *chart.Chart, outDir string, created time.Time) (string, error) {
	tmp, err := os.MkdirTemp(outDir, ".chart-")
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	saved, err := chartutil.Save(ch, tmp)
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	data, err := os.ReadFile(saved)
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	pinned, err := pinTimes(data, created)
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %s: %w", filepath.Base(saved), err)
	}
	out := filepath.Join(outDir, filepath.Base(saved))
	if err := os.WriteFile(out, pinned, 0o644); err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	if err := os.Chtimes(out, created, created); err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	return out, nil
}

// pinTimes rewrites a gzipped tar archive with every entry's modification
// time set to t, keeping the entries, their order and the gzip header.
func pinTimes(tgz []byte, t time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Header = zr.Header
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		h.ModTime, h.AccessTime, h.ChangeTime = t, time.Time{}, time.Time{}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
