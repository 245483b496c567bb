// Command tlogcheck checks rowcall's transparency log with Go's own checksum-database
// libraries, golang.org/x/mod/sumdb/note and golang.org/x/mod/sumdb/tlog (as Debian packages
// them), so that the checkpoints, signed notes and proofs are proven readable by code that
// nobody on the project wrote. tests/interop/tlog.sh builds it and runs it against a
// three-node cluster of the real rowcall-node binary.
//
// Usage:
//
//	tlogcheck -nodes URL,URL,URL -ids inv_a,inv_b,... [-min-size N] [-since STATE] [-save STATE]
//
// Against every node: the latest co-signed checkpoint (GET /api/receipts/checkpoint), its note
// opened with note.Open over verifiers built from the listed keys, signed by a strict majority
// of the voters, its body parsed here (origin, size, base64 root) and equal to the JSON fields;
// every node the same origin, voters and keys, and the same root for the same size. The leaf
// hashes (GET /api/receipts/leaves) rebuilt into the root with tlog's own tree code. For each
// receipt id, an inclusion proof from a node in turn (GET /api/receipts/proof?id=..&size=N):
// tlog.RecordHash of the leaf text is the leaf hash, tlog.CheckRecord accepts the path for
// the checkpoint's root, and the leaf's "id" is the receipt id. With -since, the checkpoint
// saved by an earlier run (-save) is proven a prefix of this one by every node
// (GET /api/receipts/consistency, tlog.CheckTree against both roots), under the same keys.
//
// Negative checks, which pass only when the libraries refuse: an inclusion proof with one
// hash changed, another index or another leaf; a note with one signature byte changed or an
// edited body; a note keeping only one of its signatures (below the majority); a note signed
// by an impostor key under a voter's name; a consistency proof with one hash changed or
// another old root.
//
// One line per check ("ok" or "FAIL"), then "tlog: N passed, M failed"; exits 1 on any
// failure. Every request is bounded in time.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// A checkpoint as GET /api/receipts/checkpoint answers it.
type checkpointJSON struct {
	Origin  string            `json:"origin"`
	Size    int64             `json:"size"`
	Root    string            `json:"root"`
	Note    string            `json:"note"`
	Signers []json.RawMessage `json:"signers"`
	Voters  []json.RawMessage `json:"voters"`
	Keys    []string          `json:"keys"`
}

// An inclusion proof as GET /api/receipts/proof answers it.
type proofJSON struct {
	ID          string          `json:"id"`
	LeafIndex   int64           `json:"leaf_index"`
	Leaf        *string         `json:"leaf"`
	LeafHash    string          `json:"leaf_hash"`
	TreeSize    int64           `json:"tree_size"`
	Root        string          `json:"root"`
	Path        []string        `json:"path"`
	BodyDropped bool            `json:"body_dropped"`
	Checkpoint  *checkpointJSON `json:"checkpoint"`
}

// A consistency proof as GET /api/receipts/consistency answers it.
type consistencyJSON struct {
	From     int64    `json:"from"`
	To       int64    `json:"to"`
	FromRoot string   `json:"from_root"`
	ToRoot   string   `json:"to_root"`
	Path     []string `json:"path"`
}

// A page of GET /api/receipts/leaves.
type leavesJSON struct {
	TreeSize int64 `json:"tree_size"`
	Leaves   []struct {
		Index int64  `json:"index"`
		ID    string `json:"id"`
		Hash  string `json:"hash"`
	} `json:"leaves"`
}

// What -save writes and -since reads: a verified checkpoint and the keys that signed it.
type savedState struct {
	Size int64    `json:"size"`
	Root string   `json:"root"`
	Keys []string `json:"keys"`
}

// Every request is bounded: a node that hangs is a failure, not a stuck CI.
var client = &http.Client{Timeout: 10 * time.Second}

// get fetches url and decodes a 200 answer into out; any other status is returned with the
// body's text in the error.
func get(u string, out any) (int, error) {
	resp, err := client.Get(u)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return resp.StatusCode, fmt.Errorf("GET %s: %v in %s", u, err, body)
	}
	return resp.StatusCode, nil
}

// The tally of checks; one line is printed per check.
type report struct{ passed, failed int }

func (r *report) check(what string, err error) bool {
	if err != nil {
		fmt.Printf("FAIL %s: %v\n", what, err)
		r.failed++
		return false
	}
	fmt.Printf("ok   %s\n", what)
	r.passed++
	return true
}

// rejects is a negative check: it passes when err is not nil.
func (r *report) rejects(what string, err error) {
	if err == nil {
		fmt.Printf("FAIL %s: accepted\n", what)
		r.failed++
		return
	}
	fmt.Printf("ok   %s: refused (%v)\n", what, err)
	r.passed++
}

func (r *report) fatal(what string, err error) {
	r.check(what, err)
	r.finish()
}

func (r *report) finish() {
	fmt.Printf("tlog: %d passed, %d failed\n", r.passed, r.failed)
	if r.failed > 0 {
		os.Exit(1)
	}
	os.Exit(0)
}

// idText is a voter or signer id as text, whether the JSON wrote it as a number or a string.
func idText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(raw))
}

func idTexts(raws []json.RawMessage) []string {
	out := make([]string, len(raws))
	for i, r := range raws {
		out[i] = idText(r)
	}
	sort.Strings(out)
	return out
}

func sorted(list []string) []string {
	out := append([]string(nil), list...)
	sort.Strings(out)
	return out
}

// What a verifier trusts: the log's origin, its voters and their keys.
type trust struct {
	origin    string
	voters    []string
	keys      []string
	verifiers note.Verifiers
	voterOf   map[string]string // key name -> voter id
}

// newTrust builds note verifiers from the listed keys (note.NewVerifier checks each key's
// hash against its name and public key) and maps each voter to its key name,
// "<origin>/node<ID>".
func newTrust(cp *checkpointJSON) (*trust, error) {
	t := &trust{origin: cp.Origin, voters: idTexts(cp.Voters), keys: sorted(cp.Keys), voterOf: map[string]string{}}
	if !strings.HasPrefix(t.origin, "rowcall/") || len(t.origin) == len("rowcall/") {
		return nil, fmt.Errorf("origin %q is not rowcall/<cluster id>", t.origin)
	}
	if len(t.voters) == 0 {
		return nil, errors.New("no voters listed")
	}
	var list []note.Verifier
	names := map[string]bool{}
	for _, k := range t.keys {
		v, err := note.NewVerifier(k)
		if err != nil {
			return nil, fmt.Errorf("key %q: %v", k, err)
		}
		list = append(list, v)
		names[v.Name()] = true
	}
	for _, id := range t.voters {
		name := t.origin + "/node" + id
		if !names[name] {
			return nil, fmt.Errorf("voter %s has no key named %s among %v", id, name, t.keys)
		}
		t.voterOf[name] = id
	}
	t.verifiers = note.VerifierList(list...)
	return t, nil
}

// A checkpoint body, parsed here: tlog.ParseTree reads only the older go.sum header, not
// C2SP's "<origin>\n<size>\n<base64 root>\n" (extension lines after the third are allowed).
type body struct {
	origin string
	size   int64
	root   tlog.Hash
}

func parseBody(text string) (body, error) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 {
		return body{}, fmt.Errorf("checkpoint body %q has fewer than three lines", text)
	}
	var b body
	b.origin = lines[0]
	if b.origin == "" {
		return body{}, errors.New("checkpoint body has no origin")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return body{}, fmt.Errorf("checkpoint size line %q is not a decimal tree size", lines[1])
	}
	b.size = size
	if b.root, err = tlog.ParseHash(lines[2]); err != nil {
		return body{}, fmt.Errorf("checkpoint root line %q: %v", lines[2], err)
	}
	return b, nil
}

// majority counts the voters whose signatures note.Open verified; a strict majority of the
// voters must have signed.
func majority(n *note.Note, t *trust) ([]string, error) {
	seen := map[string]bool{}
	var signed []string
	for _, s := range n.Sigs {
		if id, ok := t.voterOf[s.Name]; ok && !seen[id] {
			seen[id] = true
			signed = append(signed, id)
		}
	}
	sort.Strings(signed)
	if 2*len(signed) <= len(t.voters) {
		return signed, fmt.Errorf("signed by voters %v: %d of %d is not a majority", signed, len(signed), len(t.voters))
	}
	return signed, nil
}

// verifyCheckpoint opens the note with Go's note package, requires a majority, parses the
// body and checks that the JSON fields say what the signed body says.
func verifyCheckpoint(cp *checkpointJSON, t *trust) (body, []string, error) {
	n, err := note.Open([]byte(cp.Note), t.verifiers)
	if err != nil {
		return body{}, nil, fmt.Errorf("note.Open: %v", err)
	}
	signed, err := majority(n, t)
	if err != nil {
		return body{}, nil, err
	}
	b, err := parseBody(n.Text)
	if err != nil {
		return body{}, nil, err
	}
	if b.origin != t.origin || b.origin != cp.Origin {
		return body{}, nil, fmt.Errorf("signed origin %q, JSON origin %q, trusted origin %q", b.origin, cp.Origin, t.origin)
	}
	if b.size != cp.Size {
		return body{}, nil, fmt.Errorf("signed size %d, JSON size %d", b.size, cp.Size)
	}
	if root, err := tlog.ParseHash(cp.Root); err != nil || root != b.root {
		return body{}, nil, fmt.Errorf("signed root %s, JSON root %q", b.root, cp.Root)
	}
	// Every signer the node lists must be one whose signature verified.
	for _, id := range idTexts(cp.Signers) {
		found := false
		for _, s := range signed {
			found = found || s == id
		}
		if !found {
			return body{}, nil, fmt.Errorf("lists signer %s, but the note holds no verified signature of %s/node%s", id, t.origin, id)
		}
	}
	return b, signed, nil
}

func parseHashes(list []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(list))
	for i, s := range list {
		h, err := tlog.ParseHash(s)
		if err != nil {
			return nil, fmt.Errorf("path[%d] %q: %v", i, s, err)
		}
		out[i] = h
	}
	return out, nil
}

// flip returns a copy of h with one bit changed.
func flip(h tlog.Hash) tlog.Hash {
	h[7] ^= 0x10
	return h
}

// fetchCheckpoints asks every node for its latest co-signed checkpoint until all report the
// same size, at least minSize and covering every receipt id (by the leaves node 1 lists), for
// at most 20 s: signatures reach the followers through Raft, and a node asked for a
// checkpoint signs the tree it has applied, which the leader's next one (about a second
// later) extends. It returns what it last saw either way, and the checks say what differs.
func fetchCheckpoints(nodes []string, minSize int64, ids []string) ([]*checkpointJSON, []error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		cps := make([]*checkpointJSON, len(nodes))
		errs := make([]error, len(nodes))
		agree := true
		for i, n := range nodes {
			cp := &checkpointJSON{}
			if _, err := get(n+"/api/receipts/checkpoint", cp); err != nil {
				errs[i], agree = err, false
				continue
			}
			cps[i] = cp
			if cp.Size < minSize || cps[0] == nil || cp.Size != cps[0].Size {
				agree = false
			}
		}
		if agree {
			_, listed, err := fetchLeaves(nodes[0], cps[0].Size)
			for _, id := range ids {
				if _, ok := listed[id]; err == nil && !ok {
					agree = false
				}
			}
			agree = agree && err == nil
		}
		if agree || time.Now().After(deadline) {
			return cps, errs
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// proveAt asks node for the inclusion proof of id in the tree of size, waiting up to 10 s
// while it answers 409 (not yet covered).
func proveAt(node, id string, size int64) (*proofJSON, error) {
	u := fmt.Sprintf("%s/api/receipts/proof?id=%s&size=%d", node, url.QueryEscape(id), size)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := &proofJSON{}
		code, err := get(u, p)
		if code == http.StatusConflict && time.Now().Before(deadline) {
			time.Sleep(300 * time.Millisecond)
			continue
		}
		return p, err
	}
}

// checkInclusion is the whole check of one proof against a verified checkpoint.
func checkInclusion(p *proofJSON, id string, size int64, root tlog.Hash) (tlog.RecordProof, tlog.Hash, error) {
	if p.ID != id {
		return nil, tlog.Hash{}, fmt.Errorf("answered for id %q", p.ID)
	}
	if p.TreeSize != size {
		return nil, tlog.Hash{}, fmt.Errorf("tree_size %d, asked for %d", p.TreeSize, size)
	}
	if r, err := tlog.ParseHash(p.Root); err != nil || r != root {
		return nil, tlog.Hash{}, fmt.Errorf("root %q is not the checkpoint's %s", p.Root, root)
	}
	if p.Leaf == nil || p.BodyDropped {
		return nil, tlog.Hash{}, fmt.Errorf("no leaf text (body_dropped %v) for a fresh receipt", p.BodyDropped)
	}
	leafHash, err := tlog.ParseHash(p.LeafHash)
	if err != nil {
		return nil, tlog.Hash{}, fmt.Errorf("leaf_hash %q: %v", p.LeafHash, err)
	}
	if got := tlog.RecordHash([]byte(*p.Leaf)); got != leafHash {
		return nil, tlog.Hash{}, fmt.Errorf("tlog.RecordHash(leaf) = %s, leaf_hash %s", got, leafHash)
	}
	var leaf struct {
		V  json.RawMessage `json:"v"`
		ID string          `json:"id"`
	}
	if err := json.Unmarshal([]byte(*p.Leaf), &leaf); err != nil {
		return nil, tlog.Hash{}, fmt.Errorf("leaf %q is not JSON: %v", *p.Leaf, err)
	}
	if leaf.ID != id || string(leaf.V) != "1" {
		return nil, tlog.Hash{}, fmt.Errorf("leaf %q: want v 1 and id %q", *p.Leaf, id)
	}
	path, err := parseHashes(p.Path)
	if err != nil {
		return nil, tlog.Hash{}, err
	}
	if err := tlog.CheckRecord(path, size, root, p.LeafIndex, leafHash); err != nil {
		return nil, tlog.Hash{}, fmt.Errorf("tlog.CheckRecord(index %d of %d): %v", p.LeafIndex, size, err)
	}
	return path, leafHash, nil
}

// rootOfLeaves rebuilds the tree of the first n leaf hashes with tlog's own stored-hash
// code and returns its root.
func rootOfLeaves(leaves []tlog.Hash) (tlog.Hash, error) {
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			if x < 0 || x >= int64(len(stored)) {
				return nil, fmt.Errorf("stored hash %d of %d", x, len(stored))
			}
			out[i] = stored[x]
		}
		return out, nil
	})
	for i, h := range leaves {
		more, err := tlog.StoredHashesForRecordHash(int64(i), h, reader)
		if err != nil {
			return tlog.Hash{}, err
		}
		stored = append(stored, more...)
	}
	return tlog.TreeHash(int64(len(leaves)), reader)
}

// fetchLeaves reads the first n leaves, page by page (at most 1000 a page).
func fetchLeaves(node string, n int64) ([]tlog.Hash, map[string]int64, error) {
	var hashes []tlog.Hash
	index := map[string]int64{}
	for int64(len(hashes)) < n {
		var page leavesJSON
		start := len(hashes)
		if _, err := get(fmt.Sprintf("%s/api/receipts/leaves?start=%d", node, start), &page); err != nil {
			return nil, nil, err
		}
		if page.TreeSize < n {
			return nil, nil, fmt.Errorf("tree_size %d is below the checkpoint's %d", page.TreeSize, n)
		}
		if len(page.Leaves) == 0 {
			return nil, nil, fmt.Errorf("no leaves from %d (tree_size %d)", start, page.TreeSize)
		}
		for _, l := range page.Leaves {
			if int64(len(hashes)) == n {
				break
			}
			if l.Index != int64(len(hashes)) {
				return nil, nil, fmt.Errorf("leaf index %d where %d was next", l.Index, len(hashes))
			}
			h, err := tlog.ParseHash(l.Hash)
			if err != nil {
				return nil, nil, fmt.Errorf("leaf %d hash %q: %v", l.Index, l.Hash, err)
			}
			hashes = append(hashes, h)
			index[l.ID] = l.Index
		}
	}
	return hashes, index, nil
}

// tamperSignature changes one byte of the first signature (past its key id) and
// re-encodes it, so that only the signature is wrong.
func tamperSignature(text string) (string, error) {
	split := strings.LastIndex(text, "\n\n")
	if split < 0 {
		return "", errors.New("no signature block")
	}
	lines := strings.Split(text[split+2:], "\n")
	first := lines[0]
	sp := strings.LastIndex(first, " ")
	if !strings.HasPrefix(first, "— ") || sp < 0 {
		return "", fmt.Errorf("signature line %q", first)
	}
	sig, err := base64.StdEncoding.DecodeString(first[sp+1:])
	if err != nil || len(sig) < 5+10 {
		return "", fmt.Errorf("signature line %q", first)
	}
	sig[4+10] ^= 0x01
	lines[0] = first[:sp+1] + base64.StdEncoding.EncodeToString(sig)
	return text[:split+2] + strings.Join(lines, "\n"), nil
}

// keepOneSignature drops every signature line but the first.
func keepOneSignature(text string) (string, int, error) {
	split := strings.LastIndex(text, "\n\n")
	if split < 0 {
		return "", 0, errors.New("no signature block")
	}
	lines := strings.Split(strings.TrimSuffix(text[split+2:], "\n"), "\n")
	return text[:split+2] + lines[0] + "\n", len(lines), nil
}

// impostor signs the checkpoint's body with a fresh key named like the first voter's, and
// checks that note.Open refuses the note.
func impostor(signedNote string, t *trust, r *report) error {
	name := t.origin + "/node" + t.voters[0]
	skey, _, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return err
	}
	text := signedNote[:strings.LastIndex(signedNote, "\n\n")+1]
	forged, err := note.Sign(&note.Note{Text: text}, signer)
	if err != nil {
		return err
	}
	_, err = note.Open(forged, t.verifiers)
	r.rejects("note.Open of the checkpoint signed by an impostor key named "+name, err)
	return nil
}

func main() {
	nodesFlag := flag.String("nodes", "", "the nodes' HTTP base URLs, comma-separated")
	idsFlag := flag.String("ids", "", "receipt ids to prove, comma-separated")
	minSize := flag.Int64("min-size", 1, "wait until every node's checkpoint covers at least this many leaves")
	since := flag.String("since", "", "a checkpoint saved by an earlier run: prove this one consistent with it")
	save := flag.String("save", "", "where to save the verified checkpoint, for a later -since")
	flag.Parse()
	nodes := strings.Split(*nodesFlag, ",")
	ids := strings.Split(*idsFlag, ",")
	if *nodesFlag == "" || *idsFlag == "" {
		fmt.Fprintln(os.Stderr, "usage: tlogcheck -nodes URL,URL,URL -ids inv_a,inv_b [-min-size N] [-since STATE] [-save STATE]")
		os.Exit(2)
	}
	r := &report{}

	// Every node's latest co-signed checkpoint.
	cps, errs := fetchCheckpoints(nodes, *minSize, ids)
	for i, err := range errs {
		if err != nil {
			r.check(fmt.Sprintf("node %d: GET /api/receipts/checkpoint", i+1), err)
		}
	}
	if r.failed > 0 {
		r.finish()
	}

	// The keys come from the nodes; all of them must give the same ones (and, with -since,
	// the ones an earlier run verified: a verifier pins the keys it trusted).
	t, err := newTrust(cps[0])
	if err != nil {
		r.fatal("node 1: note.NewVerifier for every listed key, one key per voter", err)
	}
	r.check(fmt.Sprintf("note.NewVerifier accepts node 1's %d keys; voters %v each have one named %s/node<ID>",
		len(t.keys), t.voters, t.origin), nil)
	var prev *savedState
	if *since != "" {
		data, err := os.ReadFile(*since)
		prev = &savedState{}
		if err == nil {
			err = json.Unmarshal(data, prev)
		}
		if err != nil {
			r.fatal("read the saved checkpoint "+*since, err)
		}
		var same error
		if strings.Join(sorted(prev.Keys), "\n") != strings.Join(t.keys, "\n") {
			same = fmt.Errorf("keys %v, earlier %v", t.keys, prev.Keys)
		}
		r.check("the keys are those that signed the earlier checkpoint", same)
	}
	for i, cp := range cps[1:] {
		var err error
		if cp.Origin != t.origin || strings.Join(sorted(cp.Keys), "\n") != strings.Join(t.keys, "\n") ||
			strings.Join(idTexts(cp.Voters), ",") != strings.Join(t.voters, ",") {
			err = fmt.Errorf("origin %q voters %v keys %v; node 1: %q %v %v",
				cp.Origin, idTexts(cp.Voters), sorted(cp.Keys), t.origin, t.voters, t.keys)
		}
		r.check(fmt.Sprintf("node %d lists the same origin, voters and keys as node 1", i+2), err)
	}

	// Each node's note: note.Open, a majority of voters, a body that says what the JSON says.
	bodies := make([]body, len(cps))
	for i, cp := range cps {
		b, signed, err := verifyCheckpoint(cp, t)
		what := fmt.Sprintf("node %d: note.Open verifies the checkpoint note", i+1)
		if err == nil {
			what = fmt.Sprintf("node %d: note.Open verifies the checkpoint of size %d, signed by voters %v of %v (a majority); body %q/%d/%s",
				i+1, b.size, signed, t.voters, b.origin, b.size, b.root)
		}
		if !r.check(what, err) {
			r.finish()
		}
		bodies[i] = b
	}
	roots := map[int64]tlog.Hash{}
	var rootErr error
	for i, b := range bodies {
		if have, ok := roots[b.size]; ok && have != b.root {
			rootErr = fmt.Errorf("node %d: root %s for size %d, another node %s", i+1, b.root, b.size, have)
		}
		roots[b.size] = b.root
	}
	r.check("every node reports the same root for the same size", rootErr)
	var sizeErr error
	for i, b := range bodies {
		if b.size != bodies[0].size || b.size < *minSize {
			sizeErr = fmt.Errorf("node %d at size %d, node 1 at %d, the checkpoint asked for has %d", i+1, b.size, bodies[0].size, *minSize)
		}
	}
	if !r.check(fmt.Sprintf("every node's latest co-signed checkpoint is the same, of size %d (the one asked for has %d)", bodies[0].size, *minSize), sizeErr) {
		r.finish()
	}
	size, root := bodies[0].size, bodies[0].root

	// The leaf hashes, rebuilt into the signed root by tlog's own code.
	leafHashes, leafIndex, err := fetchLeaves(nodes[len(nodes)-1], size)
	if err == nil {
		var got tlog.Hash
		if got, err = rootOfLeaves(leafHashes); err == nil && got != root {
			err = fmt.Errorf("tlog.TreeHash over the leaves = %s, the checkpoint's root %s", got, root)
		}
	}
	r.check(fmt.Sprintf("node %d: the %d leaf hashes of /api/receipts/leaves make the checkpoint's root (tlog.StoredHashesForRecordHash, tlog.TreeHash)",
		len(nodes), size), err)

	// Each receipt: its inclusion proof from a node in turn.
	var sample *proofJSON
	var samplePath tlog.RecordProof
	var sampleHash tlog.Hash
	for i, id := range ids {
		node := nodes[i%len(nodes)]
		p, err := proveAt(node, id, size)
		var path tlog.RecordProof
		var leafHash tlog.Hash
		if err == nil {
			path, leafHash, err = checkInclusion(p, id, size, root)
		}
		if err == nil && leafIndex != nil {
			if at, ok := leafIndex[id]; !ok || at != p.LeafIndex || leafHashes[at] != leafHash {
				err = fmt.Errorf("leaf %d is not where /api/receipts/leaves lists %s (%d, found %v)", p.LeafIndex, id, at, ok)
			}
		}
		beside := ""
		if err == nil && p.Checkpoint != nil {
			// The checkpoint served beside the proof is checked like any other.
			b, _, cerr := verifyCheckpoint(p.Checkpoint, t)
			if cerr == nil && (b.size != size || b.root != root) {
				cerr = fmt.Errorf("its checkpoint is %d/%s, not %d/%s", b.size, b.root, size, root)
			}
			if cerr != nil {
				err = fmt.Errorf("the checkpoint beside the proof: %v", cerr)
			}
			beside = "; the checkpoint beside it verifies"
		}
		what := fmt.Sprintf("node %d: %s is in the checkpoint", i%len(nodes)+1, id)
		if err == nil {
			what = fmt.Sprintf("node %d: %s is leaf %d of %d: tlog.RecordHash(leaf) is leaf_hash, tlog.CheckRecord accepts its %d-hash path, the leaf's id is the receipt's%s",
				i%len(nodes)+1, id, p.LeafIndex, size, len(path), beside)
		}
		if r.check(what, err) && (sample == nil || len(path) > len(samplePath)) {
			sample, samplePath, sampleHash = p, path, leafHash
		}
	}

	// The confirmation of a receipt carries the same proof.
	if len(ids) > 0 {
		var confirmed struct {
			Proof *proofJSON `json:"proof"`
		}
		node := nodes[1%len(nodes)]
		_, err := get(fmt.Sprintf("%s/api/dispatch?confirm=%s", node, url.QueryEscape(ids[0])), &confirmed)
		if err == nil && confirmed.Proof == nil {
			err = errors.New("no \"proof\" in the confirmation")
		}
		if err == nil {
			_, _, err = checkInclusion(confirmed.Proof, ids[0], size, root)
		}
		r.check(fmt.Sprintf("node %d: GET /api/dispatch?confirm=%s carries a proof that tlog.CheckRecord accepts", 1%len(nodes)+1, ids[0]), err)
	}

	// Proofs that must not pass.
	if sample != nil && len(samplePath) > 0 {
		changed := append(tlog.RecordProof(nil), samplePath...)
		changed[len(changed)/2] = flip(changed[len(changed)/2])
		r.rejects("tlog.CheckRecord with one hash of the path changed", tlog.CheckRecord(changed, size, root, sample.LeafIndex, sampleHash))
		other := (sample.LeafIndex + 1) % size
		r.rejects(fmt.Sprintf("tlog.CheckRecord of leaf %d's proof as leaf %d", sample.LeafIndex, other),
			tlog.CheckRecord(samplePath, size, root, other, sampleHash))
		forged := strings.Replace(*sample.Leaf, `"ok":`, `"ok": `, 1)
		r.rejects("tlog.CheckRecord of the same path for another leaf text",
			tlog.CheckRecord(samplePath, size, root, sample.LeafIndex, tlog.RecordHash([]byte(forged))))
	} else {
		r.check("a proof with a path to tamper with", errors.New("no proof had a non-empty path: the tree is too small"))
	}

	// Notes that must not pass: Go's note.Open refuses a changed signature or body, and the
	// majority rule refuses a note with one signature of three.
	signedNote := cps[0].Note
	if bad, err := tamperSignature(signedNote); err != nil {
		r.check("a note to tamper with", err)
	} else {
		_, err := note.Open([]byte(bad), t.verifiers)
		var invalid *note.InvalidSignatureError
		if err != nil && !errors.As(err, &invalid) {
			err = fmt.Errorf("refused, but not as an invalid signature: %w", err)
			r.check("note.Open of a note with one signature byte changed", err)
		} else {
			r.rejects("note.Open of a note with one signature byte changed", err)
		}
	}
	edited := strings.Replace(signedNote, fmt.Sprintf("\n%d\n", size), fmt.Sprintf("\n%d\n", size+1), 1)
	_, err = note.Open([]byte(edited), t.verifiers)
	r.rejects(fmt.Sprintf("note.Open of the note with its size edited to %d", size+1), err)
	if one, had, err := keepOneSignature(signedNote); err != nil {
		r.check("a note to cut", err)
	} else {
		n, err := note.Open([]byte(one), t.verifiers)
		if err != nil {
			r.check("note.Open of a note keeping one signature", err)
		} else {
			_, err = majority(n, t)
			r.rejects(fmt.Sprintf("the majority rule for a note keeping 1 of its %d signatures (note.Open verifies that one)", had), err)
		}
	}
	// An impostor key under a voter's name: its key hash differs, so note.Open does not
	// count it (the note is unverified).
	if err := impostor(signedNote, t, r); err != nil {
		r.check("an impostor key (note.GenerateKey, note.NewSigner, note.Sign)", err)
	}

	// Consistency with the earlier checkpoint, from every node.
	if prev != nil {
		oldRoot, err := tlog.ParseHash(prev.Root)
		if err != nil {
			r.fatal("the saved checkpoint's root", err)
		}
		if prev.Size >= size {
			r.fatal("the tree grew since the saved checkpoint", fmt.Errorf("size %d, saved %d", size, prev.Size))
		}
		var sample tlog.TreeProof
		for i, node := range nodes {
			var c consistencyJSON
			_, err := get(fmt.Sprintf("%s/api/receipts/consistency?from=%d&to=%d", node, prev.Size, size), &c)
			var path tlog.TreeProof
			if err == nil && (c.From != prev.Size || c.To != size) {
				err = fmt.Errorf("answered from %d to %d", c.From, c.To)
			}
			if err == nil {
				if fr, e := tlog.ParseHash(c.FromRoot); e != nil || fr != oldRoot {
					err = fmt.Errorf("from_root %q is not the saved checkpoint's %s", c.FromRoot, oldRoot)
				} else if tr, e := tlog.ParseHash(c.ToRoot); e != nil || tr != root {
					err = fmt.Errorf("to_root %q is not the checkpoint's %s", c.ToRoot, root)
				}
			}
			if err == nil {
				path, err = parseHashes(c.Path)
			}
			if err == nil {
				err = tlog.CheckTree(path, size, root, prev.Size, oldRoot)
			}
			r.check(fmt.Sprintf("node %d: tlog.CheckTree accepts the %d-hash consistency proof from %d (saved root) to %d (signed root)",
				i+1, len(path), prev.Size, size), err)
			if err == nil && len(path) > 0 {
				sample = path
			}
		}
		// `to` defaults to the latest co-signed checkpoint.
		var c consistencyJSON
		_, err = get(fmt.Sprintf("%s/api/receipts/consistency?from=%d", nodes[0], prev.Size), &c)
		if err == nil && c.To != size {
			err = fmt.Errorf("to %d, the latest co-signed checkpoint is %d", c.To, size)
		}
		r.check("node 1: GET /api/receipts/consistency without `to` proves up to the latest co-signed checkpoint", err)
		if sample != nil {
			changed := append(tlog.TreeProof(nil), sample...)
			changed[0] = flip(changed[0])
			r.rejects("tlog.CheckTree with one hash of the consistency proof changed", tlog.CheckTree(changed, size, root, prev.Size, oldRoot))
			r.rejects("tlog.CheckTree of the same proof from another old root", tlog.CheckTree(sample, size, root, prev.Size, flip(oldRoot)))
		}
	}

	if *save != "" && r.failed == 0 {
		data, _ := json.Marshal(savedState{Size: size, Root: root.String(), Keys: t.keys})
		if err := os.WriteFile(*save, data, 0o644); err != nil {
			r.check("save the checkpoint to "+*save, err)
		}
	}
	r.finish()
}
