package image

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// WriteLayout writes idx as an OCI image layout into dir, replacing what
// was there: index.json lists idx alone, named ref.
func WriteLayout(dir string, idx v1.ImageIndex, ref string) error {
	return ReplaceLayout(dir, func(p layout.Path) error {
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
			AnnotationRefName:        ref,
			annotationContainerdName: ref,
		})); err != nil {
			return fmt.Errorf("writing the image index: %w", err)
		}
		return nil
	})
}

// ReplaceLayout writes an OCI image layout into dir, replacing what was
// there: an empty layout that fill adds blobs and index entries to, made
// readable by everyone, then moved over dir.
func ReplaceLayout(dir string, fill func(layout.Path) error) error {
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("creating the layout's parent: %w", err)
	}
	// Written next to dir and renamed over it, so that dir is either the old
	// layout or the new one, never half of each.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+"-*")
	if err != nil {
		return fmt.Errorf("creating the layout: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the layout: %w", err)
	}
	if err := fill(p); err != nil {
		return err
	}
	// MkdirTemp made the directory 0700, and blobs are written 0600 or
	// 0777: make it all readable by everyone, writable by the owner.
	if err := filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(path, mode)
	}); err != nil {
		return fmt.Errorf("writing the layout: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing the old layout: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("moving the layout into place: %w", err)
	}
	return nil
}

// WriteArchive writes the OCI image layout in dir as a tar file: its files
// in lexical order, every timestamp modTime, owned by root.
func WriteArchive(dir, file string, modTime time.Time) (err error) {
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+"-*")
	if err != nil {
		return fmt.Errorf("creating the archive: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	tw := tar.NewWriter(f)
	// WalkDir visits in lexical order.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: modTime, Mode: 0o644, Typeflag: tar.TypeReg}
		if d.IsDir() {
			h.Name, h.Mode, h.Typeflag = h.Name+"/", 0o755, tar.TypeDir
			return tw.WriteHeader(h)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h.Size = info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		return copyFile(tw, path)
	})
	if err != nil {
		return fmt.Errorf("archiving %s: %w", dir, err)
	}
	if err = tw.Close(); err != nil {
		return fmt.Errorf("writing the archive: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("writing the archive: %w", err)
	}
	if err = os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("writing the archive: %w", err)
	}
	if err = os.Rename(f.Name(), file); err != nil {
		return fmt.Errorf("moving the archive into place: %w", err)
	}
	return nil
}

// copyFile copies the file at path to w.
func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = io.Copy(w, f)
	return err
}
