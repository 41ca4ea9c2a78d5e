package engine

import (
	"errors"
	"fmt"
	"sync/atomic"

	"bitgo/kernels"
	"bitgo/paged"
)

// PackLayout names the blob layouts of package kernels as pack files record them
// (paged.PackHeader.Layout): `bitd pack` writes it, and LoadPack reads it and the older
// revisions for the formats whose layout has not changed since (kernels.ReadsLayout): a
// kernels/3 file without tl2 layers, and a kernels/2 or kernels/1 file without tl1 or tl2
// layers.
const PackLayout = kernels.LayoutRevision

// readableLayout reports whether a pack of layout revision name can be served, and if not
// why (naming the first layer in the way).
func readableLayout(name string, layers []paged.PackLayer) error {
	if !kernels.KnownLayout(name) {
		return kernels.ReadsLayout(name, "")
	}
	for _, l := range layers {
		if err := kernels.ReadsLayout(name, l.Spec.Format); err != nil {
			return fmt.Errorf("layer %s: %v", l.Spec.Name, err)
		}
	}
	return nil
}

// LoadOptions tunes LoadPackWith; the zero value is LoadPack's behaviour.
type LoadOptions struct {
	// Verify says when blob checksums are checked (default: all of them before any layer
	// is registered).
	Verify paged.Verify
	// CheckCodes also decodes every blob to check its codes (kernels.CheckBlob), for pack
	// files from an untrusted source: a checksum proves the file is what its writer wrote,
	// not that its writer was honest.
	CheckCodes bool
	// Prefix is prepended to every layer name (to load two models into one engine).
	Prefix string
	// Copy copies every blob into the engine's own memory (huge pages: paged.Arena) and
	// unmaps the file once loaded, instead of using the mapping in place. In place, decode
	// reads the weights through the page cache's pages: huge where the file system keeps
	// the file in large folios (LoadedPack.HugeMapped says how much), else 4 KiB ones, which
	// cost a decode pass through BitNet 2B up to 1.13x its time (one thread, Zen 4). A copy
	// costs the copy at load, and the page cache no longer serves other processes mapping
	// the same file.
	Copy bool
}

// LoadedPack describes a pack file registered with LoadPack.
type LoadedPack struct {
	Path  string
	Model string
	// Layers lists the registered layers in file order: Names[i] has id IDs[i].
	Names []string
	IDs   []ID
	// Bytes is the size of the packed weights (used in place, or copied: Copied).
	Bytes int64
	// Copied: the weights were copied into the engine's memory (LoadOptions.Copy) and the
	// file unmapped.
	Copied bool
	// HugeMapped, in place, is how many bytes of the file's mapping the kernel mapped with
	// huge pages once it was loaded (paged.HugeMapped; -1: unknown).
	HugeMapped int64

	e *Engine
}

// LoadPack maps a .bitgo pack file read-only and registers every layer under its name.
// The weights are used in place from the mapping (no copy; LoadPackWith can copy them into
// huge pages, LoadOptions.Copy): loading costs the mapping
// and the checksum pass, and the page cache is shared with every other process that maps
// the file. The file stays mapped until every layer loaded from it has been freed (and
// its calls have finished). On error nothing stays registered.
func (e *Engine) LoadPack(path string) (*LoadedPack, error) {
	return e.LoadPackWith(path, LoadOptions{})
}

// LoadPackWith is LoadPack with options.
func (e *Engine) LoadPackWith(path string, o LoadOptions) (_ *LoadedPack, err error) {
	p, err := paged.OpenPack(path, paged.OpenOptions{Verify: o.Verify})
	if err != nil {
		return nil, err
	}
	if err := readableLayout(p.Layout, p.Layers); err != nil {
		p.Close()
		return nil, fmt.Errorf("%w: %s: blob layout %q: %v: rewrite the file with this bitd's `bitd repack` (it converts tl2 blobs of kernels/2 to kernels/7 and int1 blobs of kernels/1 to kernels/8), or convert the checkpoint again with `bitd pack`", paged.ErrPackVersion, path, p.Layout, err)
	}
	// The mapping is released when the last reference goes: one per registered layer and
	// one held by this function until it returns.
	ref := &packRef{p: p}
	ref.n.Store(1)
	defer ref.release()

	lp := &LoadedPack{Path: path, Model: p.Model, e: e}
	defer func() {
		if err != nil {
			lp.Free()
		}
	}()
	for _, l := range p.Layers {
		blob, err := p.LayerBlob(l.Spec.Name)
		if err != nil {
			return nil, err
		}
		spec := l.Spec
		spec.Name = o.Prefix + spec.Name
		if o.CheckCodes {
			lay, err := kernels.NewLayout(spec.Format, spec.Out, spec.In)
			if err != nil {
				return nil, fmt.Errorf("%s: layer %s: %w", path, spec.Name, err)
			}
			if err := kernels.CheckBlob(lay, blob); err != nil {
				return nil, fmt.Errorf("%s: layer %s: %w", path, spec.Name, err)
			}
		}
		s := Spec{LayerSpec: spec, Packed: blob, Trusted: true, Scales: l.Scales, Bias: l.Bias}
		if !o.Copy {
			s.Borrow, s.Release = true, ref.release
			ref.n.Add(1)
		}
		id, err := e.Register(s)
		if err != nil {
			if !o.Copy {
				ref.release() // Register does not call Release when it fails
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		lp.Names = append(lp.Names, spec.Name)
		lp.IDs = append(lp.IDs, id)
		lp.Bytes += int64(len(blob))
	}
	lp.Copied = o.Copy
	if !o.Copy {
		lp.HugeMapped = p.HugeMapped()
	}
	e.log.Info("pack loaded", "path", path, "model", p.Model, "layers", len(lp.IDs), "bytes", lp.Bytes, "copied", lp.Copied, "huge_mapped", lp.HugeMapped)
	return lp, nil
}

// Free frees every layer of the pack that is still registered; the file is unmapped once
// their calls in flight have finished.
func (lp *LoadedPack) Free() error {
	var errs []error
	for _, id := range lp.IDs {
		if err := lp.e.Free(id); err != nil && !errors.Is(err, ErrNoLayer) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

type packRef struct {
	p *paged.Pack
	n atomic.Int64
}

func (r *packRef) release() {
	if r.n.Add(-1) == 0 {
		r.p.Close()
	}
}
