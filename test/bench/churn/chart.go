package churn

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strings"
)

// The chart is drawn with the standard library only: bars, and labels in a
// 3x5 pixel font scaled up.
const (
	scale      = 2           // pixels a font dot
	glyphW     = 4 * scale   // glyph advance, with one dot of spacing
	lineH      = 7 * scale   // text line height
	labelW     = 54 * glyphW // left column for the row labels: the longest, "5 of 1000 sick, flapping together, 10 min dual-stack", and a gap
	barMaxW    = 620         // the longest bar
	barH       = 12          // one bar
	chartWidth = labelW + barMaxW + 12*glyphW
	margin     = 16
)

var (
	white = color.RGBA{255, 255, 255, 255}
	ink   = color.RGBA{30, 30, 30, 255}
	grid  = color.RGBA{225, 225, 225, 255}
	// bars are the colours of ours, upstream and floor, in that order.
	bars = []color.RGBA{{31, 119, 180, 255}, {255, 127, 14, 255}, {150, 150, 150, 255}}
)

// WriteChart draws the mean writes of ours, upstream (over its repetitions
// too) and the floor for every row as horizontal bars on a log scale, with
// the numbers printed.
func WriteChart(w io.Writer, rows []Row) error {
	top := margin + 3*lineH
	rowH := 3*barH + 2 + 10
	height := top + len(rows)*rowH + margin
	img := image.NewRGBA(image.Rect(0, 0, chartWidth+2*margin, height))
	fill(img, img.Bounds(), white)

	text(img, margin, margin, "API WRITES PER SEQUENCE (MEAN OVER SEEDS, AND OVER REPETITIONS FOR UPSTREAM, LOG SCALE)", ink)
	legendX := margin
	for i, name := range []string{"OURS", "UPSTREAM", "FLOOR"} {
		fill(img, image.Rect(legendX, margin+lineH+scale, legendX+barH, margin+lineH+scale+barH), bars[i])
		text(img, legendX+barH+glyphW, margin+lineH+2*scale, name, ink)
		legendX += barH + (len(name)+3)*glyphW
	}

	maxV := 1.0
	for _, r := range rows {
		maxV = max(maxV, r.Ours().Mean.Writes, r.Upstream().Mean.Writes, r.Floor().Mean.Writes)
	}
	length := func(v float64) int { return int(math.Round(math.Log10(1+v) / math.Log10(1+maxV) * barMaxW)) }
	x0 := margin + labelW
	for _, d := range []float64{1, 10, 100, 1000, 10000} {
		if d <= maxV {
			fill(img, image.Rect(x0+length(d), top-4, x0+length(d)+1, height-margin), grid)
		}
	}
	for i, r := range rows {
		y := top + i*rowH
		text(img, margin, y+barH, fmt.Sprintf("%s %s", r.Sequence, r.Family()), ink)
		for j, v := range []float64{r.Ours().Mean.Writes, r.Upstream().Mean.Writes, r.Floor().Mean.Writes} {
			by := y + j*(barH+1)
			fill(img, image.Rect(x0, by, x0+max(1, length(v)), by+barH-1), bars[j])
			text(img, x0+length(v)+glyphW, by+(barH-5*scale)/2, num(v), ink)
		}
	}
	return png.Encode(w, img)
}

// fill paints a rectangle.
func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// text writes s with its top left corner at x, y; letters print as capitals
// and characters the font lacks as spaces.
func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for _, ch := range strings.ToUpper(s) {
		for row, bits := range font[ch] {
			for col, dot := range bits {
				if dot == '#' {
					fill(img, image.Rect(x+col*scale, y+row*scale, x+(col+1)*scale, y+(row+1)*scale), c)
				}
			}
		}
		x += glyphW
	}
}

// font is a 3x5 dot font: five rows of three dots a glyph.
var font = map[rune][5]string{
	'A': {".#.", "#.#", "###", "#.#", "#.#"}, 'B': {"##.", "#.#", "##.", "#.#", "##."},
	'C': {".##", "#..", "#..", "#..", ".##"}, 'D': {"##.", "#.#", "#.#", "#.#", "##."},
	'E': {"###", "#..", "##.", "#..", "###"}, 'F': {"###", "#..", "##.", "#..", "#.."},
	'G': {".##", "#..", "#.#", "#.#", ".##"}, 'H': {"#.#", "#.#", "###", "#.#", "#.#"},
	'I': {"###", ".#.", ".#.", ".#.", "###"}, 'J': {"..#", "..#", "..#", "#.#", ".#."},
	'K': {"#.#", "#.#", "##.", "#.#", "#.#"}, 'L': {"#..", "#..", "#..", "#..", "###"},
	'M': {"#.#", "###", "###", "#.#", "#.#"}, 'N': {"##.", "#.#", "#.#", "#.#", "#.#"},
	'O': {".#.", "#.#", "#.#", "#.#", ".#."}, 'P': {"##.", "#.#", "##.", "#..", "#.."},
	'Q': {".#.", "#.#", "#.#", "##.", ".##"}, 'R': {"##.", "#.#", "##.", "#.#", "#.#"},
	'S': {".##", "#..", ".#.", "..#", "##."}, 'T': {"###", ".#.", ".#.", ".#.", ".#."},
	'U': {"#.#", "#.#", "#.#", "#.#", "###"}, 'V': {"#.#", "#.#", "#.#", "#.#", ".#."},
	'W': {"#.#", "#.#", "###", "###", "#.#"}, 'X': {"#.#", "#.#", ".#.", "#.#", "#.#"},
	'Y': {"#.#", "#.#", ".#.", ".#.", ".#."}, 'Z': {"###", "..#", ".#.", "#..", "###"},
	'0': {"###", "#.#", "#.#", "#.#", "###"}, '1': {".#.", "##.", ".#.", ".#.", "###"},
	'2': {"##.", "..#", ".#.", "#..", "###"}, '3': {"##.", "..#", ".#.", "..#", "##."},
	'4': {"#.#", "#.#", "###", "..#", "..#"}, '5': {"###", "#..", "##.", "..#", "##."},
	'6': {".##", "#..", "###", "#.#", "###"}, '7': {"###", "..#", ".#.", ".#.", ".#."},
	'8': {"###", "#.#", "###", "#.#", "###"}, '9': {"###", "#.#", "###", "..#", "##."},
	'-': {"...", "...", "###", "...", "..."}, '>': {"#..", ".#.", "..#", ".#.", "#.."},
	'%': {"#.#", "..#", ".#.", "#..", "#.#"}, '.': {"...", "...", "...", "...", ".#."},
	'/': {"..#", "..#", ".#.", "#..", "#.."}, '(': {".#.", "#..", "#..", "#..", ".#."},
	')': {".#.", "..#", "..#", "..#", ".#."}, ',': {"...", "...", "...", ".#.", "#.."},
}
