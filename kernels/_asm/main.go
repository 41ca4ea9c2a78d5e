// Command _asm generates the amd64 assembly of package kernels with avo.
//
//	go run . -op gemv -out ../gemv_amd64.s -stubs ../gemv_amd64.go -pkg kernels
//
// (scripts/generate.sh runs every op.) Each -op writes one .s file and its Go stubs. The
// argument blocks are read at fixed offsets that mirror the structs in kernels/args.go
// (TestArgOffsets in package kernels checks them).
//
// After avo has written the assembly, a post-pass
//   - rewrites vpdpbusd in the AVX-VNNI functions (names containing "AVXVNNI") to its VEX
//     encoding, as raw bytes (the Go assembler only emits the EVEX form), and to vpdpbssd
//     (AVX-VNNI-INT8) in functions whose names contain "VNNIINT8";
//   - refuses any AVX-512-only register (X/Y/Z16-31, Z, K) in the AVX2 and AVX-VNNI
//     functions, which must run on CPUs without AVX-512, and any instruction form that avo
//     says needs AVX-512 (its "Requires" comment; vpbroadcastd from a general register,
//     say, exists only in EVEX).
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/buildtags"
)

var op = flag.String("op", "", "which file to generate: gemv, gemm, epilogue, float, misc")

func main() {
	flag.Parse()
	Constraint(buildtags.Not("noasm").ToConstraint())
	switch *op {
	case "gemv":
		genGemv()
	case "gemm":
		genGemm()
	case "epilogue":
		genEpilogue()
	case "float":
		genFloat()
	case "misc":
		genMisc()
	default:
		fmt.Fprintf(os.Stderr, "_asm: unknown -op %q\n", *op)
		os.Exit(2)
	}
	Generate()
	if out := flag.Lookup("out").Value.String(); out != "" && out != "-" {
		if err := postPass(out); err != nil {
			fmt.Fprintln(os.Stderr, "_asm:", err)
			os.Exit(1)
		}
	}
}

var (
	textRe = regexp.MustCompile(`^TEXT ·(\w+)\(SB\)`)
	dpRe   = regexp.MustCompile(`^(\s*)VPDPBUSD\s+Y(\d+), Y(\d+), Y(\d+)\s*$`)
	badRe  = regexp.MustCompile(`\b([XY](1[6-9]|2\d|3[01])|Z\d+|K[0-7])\b`)
)

// postPass applies the VEX rewrite and the AVX2 register guard to the generated file.
func postPass(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	fn := ""
	req := -1 // the line of avo's "// Requires:" comment for the next TEXT
	for i, ln := range lines {
		if strings.HasPrefix(ln, "// Requires:") {
			req = i
			continue
		}
		if m := textRe.FindStringSubmatch(ln); m != nil {
			fn = m[1]
			if req >= 0 {
				if err := guardRequires(fn, &lines[req]); err != nil {
					return fmt.Errorf("%s: %v", path, err)
				}
			}
			req = -1
			continue
		}
		ymm, vex := ymmClass(fn)
		if !ymm {
			continue
		}
		code := ln
		if c := strings.Index(code, "//"); c >= 0 {
			code = code[:c]
		}
		if m := badRe.FindString(code); m != "" {
			return fmt.Errorf("%s: function %s is AVX2-class but uses %s: %q", path, fn, m, ln)
		}
		if !vex {
			continue
		}
		if m := dpRe.FindStringSubmatch(ln); m != nil {
			rm, _ := strconv.Atoi(m[2])
			vvvv, _ := strconv.Atoi(m[3])
			dst, _ := strconv.Atoi(m[4])
			pp := 1 // 66: vpdpbusd
			name := "vpdpbusd"
			if strings.Contains(fn, "VNNIINT8") {
				pp, name = 3, "vpdpbssd" // F2: vpdpbssd
			}
			lines[i] = m[1] + vexDot(dst, vvvv, rm, pp) + fmt.Sprintf(" // {vex} %s Y%d, Y%d, Y%d", name, dst, vvvv, rm)
		} else if strings.Contains(code, "VPDPBUSD") {
			return fmt.Errorf("%s: function %s: VPDPBUSD form the VEX rewrite cannot encode: %q", path, fn, ln)
		}
	}
	return os.WriteFile(path, []byte(strings.Join(joinRaw(lines), "\n")), 0o644)
}

// joinRaw puts each raw instruction (raw: a comment naming it, then one BYTE line per
// byte) on one line, its mnemonic as the line's comment, and drops the blank line avo
// writes before a comment.
func joinRaw(lines []string) []string {
	var out []string
	for i := 0; i < len(lines); i++ {
		ln := lines[i]
		tag := strings.Index(ln, "// "+rawTag)
		if tag < 0 {
			out = append(out, ln)
			continue
		}
		if n := len(out); n > 0 && strings.TrimSpace(out[n-1]) == "" {
			out = out[:n-1]
		}
		var bs []string
		for i+1 < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "BYTE ") {
			i++
			bs = append(bs, strings.TrimSpace(lines[i]))
		}
		out = append(out, ln[:tag]+strings.Join(bs, "; ")+" // "+ln[tag+3+len(rawTag):])
	}
	return out
}

// ymmClass reports whether function fn is AVX2-class (AVX2 or AVX-VNNI in its name: it must
// run on CPUs without AVX-512), and whether it is an AVX-VNNI one (its dot products go VEX).
func ymmClass(fn string) (ymm, vex bool) {
	vex = strings.Contains(fn, "AVXVNNI")
	return vex || strings.Contains(fn, "AVX2"), vex
}

// guardRequires checks avo's list of the extensions an AVX2-class function needs: none may
// be AVX-512 (some AVX2-looking forms exist only in EVEX, such as vpbroadcastd from a
// general register, and would raise SIGILL on a CPU without AVX-512). The AVX-VNNI
// functions' dot products, which avo lists as AVX512VL and AVX512VNNI, are rewritten to
// VEX, and their list says so.
func guardRequires(fn string, req *string) error {
	ymm, vex := ymmClass(fn)
	if !ymm {
		return nil
	}
	if vex {
		dot := "AVXVNNI"
		if strings.Contains(fn, "VNNIINT8") {
			dot = "AVXVNNIINT8"
		}
		*req = strings.Replace(*req, "AVX512VL, AVX512VNNI", dot, 1)
	}
	if strings.Contains(*req, "AVX512") {
		return fmt.Errorf("function %s is AVX2-class but needs AVX-512 (%s)", fn, strings.TrimPrefix(*req, "// "))
	}
	return nil
}

// vexDot encodes VEX.256.pp.0F38.W0 50 /r (vpdpbusd pp=66, vpdpbssd pp=F2) with register
// operands: dst in ModRM.reg, src1 in VEX.vvvv, src2 in ModRM.rm.
func vexDot(dst, src1, src2, pp int) string {
	r := (^dst >> 3) & 1
	bb := (^src2 >> 3) & 1
	b1 := r<<7 | 1<<6 | bb<<5 | 0x02
	b2 := 0<<7 | (^src1&15)<<3 | 1<<2 | pp
	modrm := 0xC0 | (dst&7)<<3 | (src2 & 7)
	return fmt.Sprintf("BYTE $0xc4; BYTE $0x%02x; BYTE $0x%02x; BYTE $0x50; BYTE $0x%02x", b1, b2, modrm)
}
