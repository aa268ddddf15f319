module github.com/gantry-dev/gantry/cmd/gantry

go 1.26.8

require (
	github.com/gantry-dev/gantry/pkg/composition v0.0.0
	github.com/gantry-dev/gantry/pkg/dag v0.0.0
	github.com/spf13/cobra v1.10.2
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
)

replace github.com/gantry-dev/gantry/pkg/dag => ../../pkg/dag

replace github.com/gantry-dev/gantry/pkg/composition => ../../pkg/composition
