module github.com/gantry-dev/gantry/pkg/composition

go 1.26.8

require (
	github.com/gantry-dev/gantry/pkg/dag v0.0.0
	go.yaml.in/yaml/v3 v3.0.6
)

replace github.com/gantry-dev/gantry/pkg/dag => ../dag
