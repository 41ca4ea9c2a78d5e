package main

import (
	"fmt"
	"io"
	"maps"

	"bitgo/kernels"
	"bitgo/paged"
)

func init() {
	register(command{name: "repack", summary: "rewrite a .bitgo pack file of an older blob layout in this bitd's (no checkpoint needed)", run: runRepack})
}

const repackUsage = `usage: bitd repack OLD.bitgo -o NEW.bitgo

Rewrites a pack file that an older bitd wrote in this bitd's blob layout (` + kernels.LayoutRevision + `),
so that it loads again without converting its checkpoint anew. tl2 blobs of kernels/2 to
kernels/7 are laid out as this layout lays out their shape (chunks of up to 10 blocks, panels
of 32 row blocks, or two panels: the same blocks in another order) and checked; int1 blobs of
kernels/1 to kernels/8 are encoded again in this layout (the same weights); every other
layer, stored tensor and external entry is copied as it is. A blob whose layout changed in a
way that needs its weights again (tl2 of kernels/1, tl1 before kernels/3) is refused, naming
the layer: convert the checkpoint with ` + "`bitd pack`" + `. NEW may be OLD: the file is replaced by
rename when the new one is complete.

flags:
`

func runRepack(args []string, stdout, stderr io.Writer) int {
	fs := usageFlagSet("repack", repackUsage, stderr)
	out := fs.String("o", "", "output pack file (required)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitForParse(err)
	}
	if len(pos) != 1 || *out == "" {
		fmt.Fprintln(stderr, "bitd repack: want exactly one OLD.bitgo and -o NEW.bitgo")
		fs.Usage()
		return 2
	}
	msg, err := repack(pos[0], *out)
	if err != nil {
		fmt.Fprintf(stderr, "bitd repack: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, msg)
	return 0
}

// repack writes the pack file at in to out in kernels.LayoutRevision (see repackUsage) and
// says what it did.
func repack(in, out string) (string, error) {
	p, err := paged.OpenPack(in, paged.OpenOptions{}) // every blob's checksum checked first
	if err != nil {
		return "", err
	}
	defer p.Close()
	if p.Layout == kernels.LayoutRevision {
		return fmt.Sprintf("%s is in layout %s already: nothing to do", in, p.Layout), nil
	}
	if !kernels.KnownLayout(p.Layout) {
		return "", fmt.Errorf("%s: %v", in, kernels.ReadsLayout(p.Layout, ""))
	}
	meta := maps.Clone(p.Metadata)
	if meta == nil {
		meta = map[string]string{}
	}
	meta["repacked_from_layout"] = p.Layout
	w, err := paged.CreatePack(out, paged.PackOptions{Model: p.Model, Layout: kernels.LayoutRevision,
		CreatedBy: "bitd repack (of a pack by " + p.CreatedBy + ")", Metadata: meta, Align: p.Align})
	if err != nil {
		return "", err
	}
	defer w.Abort() // (a no-op after Close)
	changed := 0
	for _, l := range p.Layers {
		blob, err := p.LayerBlob(l.Spec.Name)
		if err != nil {
			return "", err
		}
		nb, err := kernels.Relayout(p.Layout, l.Spec.Format, l.Spec.Out, l.Spec.In, blob)
		if err != nil {
			return "", fmt.Errorf("%s: layer %s: %w", in, l.Spec.Name, err)
		}
		if len(nb) > 0 && &nb[0] != &blob[0] {
			changed++
		}
		if err := w.AddLayer(paged.PackLayer{Spec: l.Spec, Scales: l.Scales, Bias: l.Bias}, nb); err != nil {
			return "", err
		}
	}
	for _, t := range p.Tensors {
		_, data, err := p.TensorData(t.Name)
		if err != nil {
			return "", err
		}
		if err := w.AddTensor(t.TensorInfo, data); err != nil {
			return "", err
		}
	}
	for _, e := range p.External {
		if err := w.AddExternal(e); err != nil {
			return "", err
		}
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	return fmt.Sprintf("wrote %s in layout %s: %d layers (%d laid out anew from %s), %d tensors stored, %d external",
		out, kernels.LayoutRevision, len(p.Layers), changed, p.Layout, len(p.Tensors), len(p.External)), nil
}
