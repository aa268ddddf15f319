module github.com/gantry-dev/gantry/pkg/events

go 1.26.8
