module github.com/gantry-dev/gantry/services/executor

go 1.26.8
