// Package docs checks the Markdown documentation as a reader follows it:
// every link into the repository leads to a file that exists (and to a
// heading that exists, when it names one), the README stays short, and
// every `make` target the documents tell a reader to run is one.
package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's top folder, seen from this package's.
const root = "../.."

// readmeMaxLines is what the README may hold: what the project is, the two
// commands, install, a short tour and links; the rest lives in docs/ by
// audience.
const readmeMaxLines = 250

// thisRepo is how documents link to this repository's files on GitHub
// (blob or tree, at a branch or a tag); the path after it must exist here.
var thisRepo = regexp.MustCompile(`^https://github\.com/backendslice/backendslice/(?:blob|tree)/[^/]+/(.+)$`)

// documents are the Markdown files a reader of the repository follows.
func documents(t *testing.T) []string {
	t.Helper()
	var docs []string
	for _, pattern := range []string{"*.md", "docs/*.md", "test/*.md", "charts/*/*.md", "examples/*/*/*.md"} {
		found, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, found...)
	}
	if len(docs) < 10 {
		t.Fatalf("found only %d Markdown files: %v", len(docs), docs)
	}
	return docs
}

// link is one Markdown link of a document.
type link struct {
	line   int
	target string
}

var (
	// inlineLink is [text](target) or ![alt](target), the target without
	// a title.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpan is inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`[^`]*`")
)

// markdownLinks returns the links of a Markdown text outside code blocks
// and code spans.
func markdownLinks(text string) []link {
	var links []link
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, "``"), -1) {
			links = append(links, link{line: i + 1, target: m[1]})
		}
	}
	return links
}

var (
	// headingLine is an ATX heading outside code blocks.
	headingLine = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// notInSlug is what GitHub drops from a heading's text to make its anchor.
	notInSlug = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
)

// slug is the anchor GitHub gives a heading: lower case, punctuation
// dropped, spaces made hyphens.
func slug(heading string) string {
	s := strings.ToLower(notInSlug.ReplaceAllString(heading, ""))
	return strings.ReplaceAll(s, " ", "-")
}

// anchors returns the anchors of a Markdown text's headings, a repeated
// heading's numbered as GitHub numbers them (-1, -2, ...).
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		m := headingLine.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Install a release":                                   "install-a-release",
		"Probes: health for backends that have none":          "probes-health-for-backends-that-have-none",
		"AWS: `awsRDS`, `awsEC2`":                             "aws-awsrds-awsec2",
		"Reviewing a pull request: `backendslice render`":     "reviewing-a-pull-request-backendslice-render",
		"(a) 1 ExternalBackend, 10,000 IPv4 endpoints":        "a-1-externalbackend-10000-ipv4-endpoints",
		"What `make test` needs":                              "what-make-test-needs",
		"Upgrading from 0.1: sources without a provider":      "upgrading-from-01-sources-without-a-provider",
		"BackendProviders: which namespaces may publish what": "backendproviders-which-namespaces-may-publish-what",
		"Caches: ElastiCache and MemoryDB":                    "caches-elasticache-and-memorydb",
		"the_underscore stays":                                "the_underscore-stays",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestMarkdownLinksAndAnchors(t *testing.T) {
	text := "# Title\n\nSee [a](a.md#x) and ![img](p.png), not `[b](b.md)`.\n```\n[c](c.md)\n## Not a heading\n```\n## Title\n[d](#title-1 \"t\")\n"
	got := markdownLinks(text)
	want := []link{{3, "a.md#x"}, {3, "p.png"}, {9, "#title-1"}}
	if !slices.Equal(got, want) {
		t.Errorf("links %v, want %v", got, want)
	}
	a := anchors(text)
	if !a["title"] || !a["title-1"] || a["not-a-heading"] || len(a) != 2 {
		t.Errorf("anchors %v, want title and title-1", a)
	}
}

// TestLinksResolve follows every link of every document into the
// repository: the file or folder exists, and a #fragment into a Markdown
// file names one of its headings.
func TestLinksResolve(t *testing.T) {
	texts := map[string]string{}
	read := func(path string) string {
		if text, ok := texts[path]; ok {
			return text
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		texts[path] = string(b)
		return texts[path]
	}
	checked := 0
	for _, doc := range documents(t) {
		name, _ := filepath.Rel(root, doc)
		for _, l := range markdownLinks(read(doc)) {
			target := l.target
			if m := thisRepo.FindStringSubmatch(target); m != nil {
				target = "/" + m[1]
			} else if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, fragment, _ := strings.Cut(target, "#")
			switch {
			case path == "":
				path = doc
			case strings.HasPrefix(path, "/"):
				path = filepath.Join(root, path)
			default:
				path = filepath.Join(filepath.Dir(doc), path)
			}
			checked++
			info, err := os.Stat(path)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", name, l.line, l.target, err)
				continue
			}
			if fragment == "" || info.IsDir() || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchors(read(path))[fragment] {
				t.Errorf("%s:%d: link %q: %s has no heading #%s", name, l.line, l.target, path, fragment)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links: the documents link to each other more than that", checked)
	}
}

// TestReadmeIsShort: a newcomer reads the whole README.
func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n >= readmeMaxLines {
		t.Errorf("README.md has %d lines, want under %d: move what one audience needs into docs/", n, readmeMaxLines)
	}
}

var (
	// makeTarget is a rule's target in the Makefile.
	makeTarget = regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):`)
	// makeCommand is `make` and the targets after it, in a command.
	makeCommand = regexp.MustCompile(`(?:^|[\s;&|(])make((?:\s+[a-z][a-z0-9-]*)+)`)
)

// TestDocumentedMakeTargetsExist: every `make X` the README and docs/ tell
// a reader to run, in code spans and code blocks, is a target of the
// Makefile.
func TestDocumentedMakeTargetsExist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(b), -1) {
		targets[m[1]] = true
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, doc := range append(docs, filepath.Join(root, "README.md")) {
		f, err := os.Open(doc)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, doc)
		inFence, n := false, 0
		for s := bufio.NewScanner(f); s.Scan(); {
			n++
			line := s.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inFence = !inFence
				continue
			}
			code := []string{line}
			if !inFence {
				code = codeSpan.FindAllString(line, -1)
			}
			for _, c := range code {
				for _, m := range makeCommand.FindAllStringSubmatch(strings.Trim(c, "`"), -1) {
					for _, target := range strings.Fields(m[1]) {
						named++
						if !targets[target] {
							t.Errorf("%s:%d: `make %s`: the Makefile has no target %s", name, n, target, target)
						}
					}
				}
			}
		}
		_ = f.Close()
	}
	if named < 20 {
		t.Errorf("found %d make targets in the documents: the parser misses them", named)
	}
}
