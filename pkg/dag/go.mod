module github.com/gantry-dev/gantry/pkg/dag

go 1.26.8
