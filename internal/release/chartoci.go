package release

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"

	"github.com/backendslice/backendslice/internal/image"
)

// ChartArtifact is a chart as an OCI artifact: the blobs `helm push` sends
// to a registry.
type ChartArtifact struct {
	// Manifest, Config and Chart are the blobs: the image manifest, the
	// chart's metadata (Helm's config media type) and the packaged chart
	// (Helm's content media type).
	Manifest, Config, Chart []byte
	// Tag is the chart's version: `helm push` tags the manifest with it.
	Tag string
}

// Digest is the manifest's digest: what a registry reports for the pushed
// chart, and what cosign signs.
func (a ChartArtifact) Digest() digest.Digest {
	return digest.FromBytes(a.Manifest)
}

// NewChartArtifact makes the OCI artifact `helm push` makes of the
// packaged chart tgz when the chart file was last modified at created
// (helm push stamps the manifest with that time): the same config, layer
// and annotations, marshalled the same way, hence the same digest.
func NewChartArtifact(tgz []byte, created time.Time) (ChartArtifact, error) {
	ch, err := loader.LoadArchive(bytes.NewReader(tgz))
	if err != nil {
		return ChartArtifact{}, fmt.Errorf("loading the packaged chart: %w", err)
	}
	config, err := json.Marshal(ch.Metadata)
	if err != nil {
		return ChartArtifact{}, fmt.Errorf("chart metadata: %w", err)
	}
	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		Config:      descriptorOf(registry.ConfigMediaType, config),
		Layers:      []ocispec.Descriptor{descriptorOf(registry.ChartLayerMediaType, tgz)},
		Annotations: chartAnnotations(ch.Metadata, created),
	})
	if err != nil {
		return ChartArtifact{}, fmt.Errorf("chart manifest: %w", err)
	}
	return ChartArtifact{Manifest: manifest, Config: config, Chart: tgz, Tag: ch.Metadata.Version}, nil
}

// descriptorOf describes a blob.
func descriptorOf(mediaType string, data []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
}

// chartAnnotations are the manifest annotations Helm derives from a
// chart's metadata: the OCI description, title, version, url, created,
// source (the first) and authors (the maintainers), then the chart's own
// annotations, which may not replace the title or the version. Empty values
// are left out.
func chartAnnotations(m *chart.Metadata, created time.Time) map[string]string {
	a := map[string]string{}
	set := func(k, v string) {
		if strings.TrimSpace(v) != "" {
			a[k] = v
		}
	}
	set(ocispec.AnnotationDescription, m.Description)
	set(ocispec.AnnotationTitle, m.Name)
	set(ocispec.AnnotationVersion, m.Version)
	set(ocispec.AnnotationURL, m.Home)
	set(ocispec.AnnotationCreated, created.UTC().Format(time.RFC3339))
	if len(m.Sources) > 0 {
		set(ocispec.AnnotationSource, m.Sources[0])
	}
	authors := make([]string, 0, len(m.Maintainers))
	for _, mt := range m.Maintainers {
		s := mt.Name
		if mt.Email != "" {
			s += " (" + mt.Email + ")"
		}
		authors = append(authors, s)
	}
	set(ocispec.AnnotationAuthors, strings.Join(authors, ", "))
	for k, v := range m.Annotations {
		if k != ocispec.AnnotationTitle && k != ocispec.AnnotationVersion {
			a[k] = v
		}
	}
	return a
}

// WriteLayout writes the artifact as an OCI image layout into dir
// (replacing what was there), its manifest named by its tag in index.json,
// as `oras cp --from-oci-layout dir:<tag>` reads it.
func (a ChartArtifact) WriteLayout(dir string) error {
	return image.ReplaceLayout(dir, func(p layout.Path) error {
		for _, b := range [][]byte{a.Chart, a.Config, a.Manifest} {
			if err := p.WriteBlob(hashOf(b), io.NopCloser(bytes.NewReader(b))); err != nil {
				return fmt.Errorf("writing the chart's blobs: %w", err)
			}
		}
		return p.AppendDescriptor(v1.Descriptor{
			MediaType:   types.OCIManifestSchema1,
			Digest:      hashOf(a.Manifest),
			Size:        int64(len(a.Manifest)),
			Annotations: map[string]string{image.AnnotationRefName: a.Tag},
		})
	})
}

// hashOf is the sha256 digest of data, as go-containerregistry spells it.
func hashOf(data []byte) v1.Hash {
	d := digest.FromBytes(data)
	return v1.Hash{Algorithm: d.Algorithm().String(), Hex: d.Encoded()}
}
