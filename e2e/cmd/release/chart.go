package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Overlays are the kustomize overlays released as rendered manifests.
var Overlays = []string{"standalone", "nrc", "capi-management"}

// packageChart packages the chart with version and appVersion set to the
// release (the image tag defaults to appVersion), as helm package would.
func packageChart(chartDir, dir string, o options) error {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return err
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = o.version, o.version
	if o.imageRepo != "certready" {
		// The packaged values.yaml is the raw file (comments kept): set the
		// repository there.
		for _, f := range ch.Raw {
			if f.Name == chartutil.ValuesfileName {
				old := []byte("image:\n  repository: certready\n")
				if !bytes.Contains(f.Data, old) {
					return fmt.Errorf("values.yaml: no %q to set the image repository in", old)
				}
				f.Data = bytes.Replace(f.Data, old, []byte("image:\n  repository: "+o.imageRepo+"\n"), 1)
			}
		}
	}
	if err := chartutil.ValidateAgainstSchema(ch, ch.Values); err != nil {
		return err
	}
	file, err := chartutil.Save(ch, dir)
	if err != nil {
		return err
	}
	fmt.Printf("  chart %s\n", filepath.Base(file))
	return nil
}

// renderManifests renders each overlay with the release's image reference,
// as 'kustomize build' of an overlay of it with an images: entry would.
func renderManifests(manifests, dir string, o options) error {
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsNone // the overlay lives outside the wrapper's folder
	for _, name := range Overlays {
		wrapper, err := os.MkdirTemp("", "certready-release-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(wrapper)
		// Kustomize takes a folder only by a relative path.
		rel, err := filepath.Rel(wrapper, filepath.Join(manifests, "overlays", name))
		if err != nil {
			return err
		}
		k := types.Kustomization{
			TypeMeta:  types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
			Resources: []string{rel},
			Images:    []types.Image{{Name: "certready", NewName: o.imageRepo, NewTag: o.version}},
		}
		data, err := yaml.Marshal(k)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(wrapper, "kustomization.yaml"), data, 0o644); err != nil {
			return err
		}
		m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), wrapper)
		if err != nil {
			return fmt.Errorf("overlay %s: %w", name, err)
		}
		out, err := m.AsYaml()
		if err != nil {
			return err
		}
		ref := o.imageRepo + ":" + o.version
		if !bytes.Contains(out, []byte("image: "+ref+"\n")) {
			return fmt.Errorf("overlay %s: no container references %s after rendering", name, ref)
		}
		file := filepath.Join(dir, fmt.Sprintf("certready-%s-%s.yaml", o.version, name))
		if err := os.WriteFile(file, out, 0o644); err != nil {
			return err
		}
		fmt.Printf("  manifests %s\n", filepath.Base(file))
	}
	return nil
}

// writeChecksums writes SHA256SUMS (sha256sum's format) over every file in
// dir and says how many.
func writeChecksums(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var lines []string
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == "SHA256SUMS" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return 0, err
		}
		sum := sha256.Sum256(data)
		lines = append(lines, hex.EncodeToString(sum[:])+"  "+e.Name())
	}
	sort.Strings(lines)
	return len(lines), os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
