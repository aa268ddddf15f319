module github.com/gantry-dev/gantry/pkg/buildinfo

go 1.26.8
