module github.com/gantry-dev/gantry/services/state-store

go 1.26.8
