package driver

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
)

// modulePath is the repository's Go module.
const modulePath = "github.com/prefixcache/caddy-prefixcache"

// RepoRoot returns the repository root: the nearest directory at or above
// the working directory whose go.mod declares this module, so that the
// commands find Caddyfile.example and the traces wherever they are run from
// inside the repository.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the " + modulePath + " repository")
		}
		dir = parent
	}
}
