package composition

import "github.com/gantry-dev/gantry/pkg/dag"

// Edit changes a composition document, its inventory inlined, before it
// is loaded: the gantry CLI's --var and --var-file write extra_vars so.
type Edit func(root *dag.Value)

// LoadFileWith is LoadFileWarn with edit applied to the document first.
func LoadFileWith(path string, edit Edit, warn func(dag.Problem)) (*dag.Composition, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	root, _, rerr := resolve(path, data, fileDir(path), warn)
	if root == nil {
		return nil, rerr
	}
	edit(root)
	return loadResolved(root, rerr)
}

// ReadForSubmitWith is ReadForSubmitWarn with edit applied to the document
// first: the composition (its inventory inlined) is then always sent as
// JSON, and only once it loads without a problem (err holds every
// problem, with the lines of the file). A file over the size limit comes
// back as read, for the caller to refuse.
func ReadForSubmitWith(path string, edit Edit, warn func(dag.Problem)) ([]byte, error) {
	data, err := ReadFile(path)
	if err != nil || len(data) > dag.DefaultMaxBytes {
		return data, err
	}
	root, _, rerr := resolve(path, data, fileDir(path), warn)
	if root == nil {
		return nil, rerr
	}
	edit(root)
	if _, err := loadResolved(root, rerr); err != nil {
		return nil, err
	}
	return EncodeJSON(root), nil
}
