module github.com/gantry-dev/gantry/pkg/secrets

go 1.26.8

require github.com/gantry-dev/gantry/pkg/dag v0.0.0

replace github.com/gantry-dev/gantry/pkg/dag => ../dag
